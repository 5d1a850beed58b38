package testenv

import (
	"context"
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
	url := localKMS.running(t)
	out, err := LocalKMSClient(url).CreateKey(context.Background(), &kms.CreateKeyInput{})
	if err != nil {
		t.Fatalf("testenv: local-kms CreateKey: %v", err)
	}
	return url, aws.ToString(out.KeyMetadata.Arn)
}

// LocalKMSClient returns a KMS client of the local-kms at endpoint.
func LocalKMSClient(endpoint string) *kms.Client {
	return kms.New(kms.Options{
		Region:       LocalKMSRegion,
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
	})
}

// localKMS is a local-kms, an AWS KMS emulator, started by
// localstack/local-kms.sh (which builds the pinned version into the
// cache once).
var localKMS = &server{name: "local-kms", script: "local-kms.sh",
	stateEnv: "DURASHUFFLE_LOCALKMS_STATE", watchEnv: "DURASHUFFLE_LOCALKMS_WATCH_PID"}
