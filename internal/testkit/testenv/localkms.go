package testenv

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/kms"
)

// LocalKMSRegion is the region local-kms serves (its default).
const LocalKMSRegion = "eu-west-2"

// LocalKMS returns the endpoint (http://127.0.0.1:port) of a local-kms,
// an AWS KMS emulator, that this test binary starts with
// localstack/local-kms.sh on first use (building the pinned version into
// the cache once), and a fresh symmetric key on it (its ARN). Main stops
// the server when the tests end; if the binary dies first, the script's
// watchdog stops it. The test fails, never skips, if no server can be
// had. The server takes any credentials.
func LocalKMS(t testing.TB) (endpoint, keyARN string) {
	t.Helper()
	localKMS.once.Do(startLocalKMS)
	if localKMS.err != nil {
		t.Fatalf("testenv: start local-kms: %v", localKMS.err)
	}
	out, err := LocalKMSClient(localKMS.url).CreateKey(context.Background(), &kms.CreateKeyInput{})
	if err != nil {
		t.Fatalf("testenv: local-kms CreateKey: %v", err)
	}
	return localKMS.url, aws.ToString(out.KeyMetadata.Arn)
}

// LocalKMSClient returns a KMS client of the local-kms at endpoint.
func LocalKMSClient(endpoint string) *kms.Client {
	return kms.New(kms.Options{
		Region:       LocalKMSRegion,
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
	})
}

var localKMS struct {
	once  sync.Once
	url   string
	err   error
	root  string
	state string // the script's state dir; empty if not started
}

// stopLocalKMS stops the local-kms LocalKMS started, if any.
func stopLocalKMS() error {
	s := &localKMS
	if s.state == "" {
		return nil
	}
	defer os.RemoveAll(s.state)
	cmd := exec.Command("bash", filepath.Join(s.root, "localstack", "local-kms.sh"), "stop")
	cmd.Env = append(os.Environ(), "DURASHUFFLE_LOCALKMS_STATE="+s.state)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("localstack/local-kms.sh stop: %w\n%s", err, out)
	}
	return nil
}

func startLocalKMS() {
	s := &localKMS
	root, err := repoRoot()
	if err != nil {
		s.err = err
		return
	}
	state, err := os.MkdirTemp("", "durashuffle-localkms-state-")
	if err != nil {
		s.err = err
		return
	}
	s.root, s.state = root, state
	cmd := exec.Command("bash", filepath.Join(root, "localstack", "local-kms.sh"), "start")
	cmd.Env = append(os.Environ(),
		"DURASHUFFLE_LOCALKMS_STATE="+state,
		"DURASHUFFLE_LOCALKMS_WATCH_PID="+strconv.Itoa(os.Getpid()))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		s.err = fmt.Errorf("localstack/local-kms.sh start: %w\n%s", err, stderr.String())
		return
	}
	for line := range strings.Lines(string(out)) {
		if v, ok := strings.CutPrefix(line, "endpoint="); ok {
			s.url = strings.TrimSpace(v)
		}
	}
	if s.url == "" {
		s.err = fmt.Errorf("localstack/local-kms.sh start printed no endpoint=: %q\n%s", out, stderr.String())
	}
}
