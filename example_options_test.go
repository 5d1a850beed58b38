package durashuffle_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/embedded"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/prometheus/client_golang/prometheus"
)

// An engine that brings its own AWS configuration (credentials, region,
// middleware), HTTP client and Prometheus registry. Open sends no request.
func ExampleOpen_options() {
	awsCfg := aws.Config{Region: "eu-west-1"} // usually config.LoadDefaultConfig(ctx, ...)
	reg := prometheus.NewRegistry()
	cfg := durashuffle.DefaultConfig()
	cfg.Store.Bucket = "shuffle"
	cfg.Read.GapBytes = 512 * durashuffle.KiB // one GET for frames up to 512 KiB apart
	c, err := durashuffle.Open(context.Background(), cfg,
		durashuffle.WithAWSConfig(awsCfg),
		durashuffle.WithHTTPClient(&http.Client{Timeout: 10 * time.Minute}),
		durashuffle.WithRegisterer(reg))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	families, err := reg.Gather()
	if err != nil {
		log.Fatal(err)
	}
	ours := 0
	for _, f := range families {
		if strings.HasPrefix(f.GetName(), "durashuffle_") {
			ours++
		}
	}
	fmt.Println("metrics registered:", ours > 0)
	fmt.Println("upload slots:", c.Stats().Concurrency == cfg.Write.UploadConcurrency)
	// Output:
	// metrics registered: true
	// upload slots: true
}

// Seal merges the manifests of workers "0".."N-1", which must all have
// committed. The commit guard has probed the store by the first commit.
func ExampleClient_Seal() {
	ctx := context.Background()
	srv, err := embedded.Start("", "shuffle")
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	cfg := durashuffle.DefaultConfig()
	cfg.Store.Bucket, cfg.Store.Endpoint, cfg.Store.PathStyle = "shuffle", srv.Endpoint(), true
	c, err := durashuffle.Open(ctx, cfg, durashuffle.WithCredentials(srv.Credentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	fmt.Println("guard before:", c.CommitGuard().State == durashuffle.GuardUnprobed)
	for _, name := range []string{"0", "1"} {
		w, err := c.NewWriter(ctx, durashuffle.WriterOptions{Query: "q2", Stage: 0, Worker: name, Partitions: 2})
		if err != nil {
			log.Fatal(err)
		}
		if _, err := w.Commit(ctx); err != nil { // no rows: an empty output
			log.Fatal(err)
		}
	}
	fmt.Println("guard after:", c.CommitGuard().State == durashuffle.GuardEnforced)
	st, err := c.Seal(ctx, "q2", 0, 2)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("sealed workers:", len(st.Workers))
	// Output:
	// guard before: true
	// guard after: true
	// sealed workers: 2
}

// What an engine does with a failed task: IsRetryable decides whether to
// run it again, and a CleanupError names the attempt whose leftovers are
// gc's.
func ExampleIsRetryable() {
	err := fmt.Errorf("commit: %w", &durashuffle.CleanupError{
		Err:     fmt.Errorf("worker 3: %w", manifest.ErrAlreadyCommitted),
		Cleanup: errors.New("delete: timeout"),
		Attempt: "20250101T000000-0a1b2c3d",
	})
	var ce *durashuffle.CleanupError
	if errors.As(err, &ce) {
		fmt.Println("left to gc:", ce.Attempt)
	}
	fmt.Println("run again:", durashuffle.IsRetryable(err))
	// Output:
	// left to gc: 20250101T000000-0a1b2c3d
	// run again: false
}
