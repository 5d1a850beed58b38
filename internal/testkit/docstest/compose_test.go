package docstest

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// TestComposeFile checks localstack/docker-compose.yml as far as a
// machine without a Docker engine can: it is valid YAML with the three
// services the docs name, MinIO is built at the version localstack/minio.sh
// pins (the one every test runs against), every published port is bound
// to loopback, and the bucket is created only once both servers are
// healthy.
func TestComposeFile(t *testing.T) {
	b, err := os.ReadFile(repoFile(t, "localstack/docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var compose struct {
		Services map[string]struct {
			Build struct {
				DockerfileInline string `yaml:"dockerfile_inline"`
			} `yaml:"build"`
			Image       string   `yaml:"image"`
			Ports       []string `yaml:"ports"`
			Healthcheck struct {
				Test []string `yaml:"test"`
			} `yaml:"healthcheck"`
			DependsOn map[string]struct {
				Condition string `yaml:"condition"`
			} `yaml:"depends_on"`
			Command []string `yaml:"command"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(b, &compose); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	for _, name := range []string{"minio", "localstack", "create-buckets"} {
		if _, ok := compose.Services[name]; !ok {
			t.Fatalf("docker-compose.yml has no service %q", name)
		}
	}

	sh, err := os.ReadFile(repoFile(t, "localstack/minio.sh"))
	if err != nil {
		t.Fatal(err)
	}
	pin := regexp.MustCompile(`(?m)^readonly MINIO_VERSION=(\S+)$`).FindSubmatch(sh)
	if pin == nil {
		t.Fatal("localstack/minio.sh pins no MINIO_VERSION")
	}
	minio := compose.Services["minio"]
	if want := "go install github.com/minio/minio@" + string(pin[1]); !strings.Contains(minio.Build.DockerfileInline, want) {
		t.Errorf("the compose MinIO is not built with %q (minio.sh's pin):\n%s", want, minio.Build.DockerfileInline)
	}

	for name, s := range compose.Services {
		for _, p := range s.Ports {
			if !strings.HasPrefix(p, "127.0.0.1:") {
				t.Errorf("service %s publishes %q beyond loopback", name, p)
			}
		}
		if name != "create-buckets" && len(s.Healthcheck.Test) == 0 {
			t.Errorf("service %s has no healthcheck for create-buckets to wait on", name)
		}
	}
	cb := compose.Services["create-buckets"]
	for _, dep := range []string{"minio", "localstack"} {
		if cb.DependsOn[dep].Condition != "service_healthy" {
			t.Errorf("create-buckets does not wait for %s to be healthy: %+v", dep, cb.DependsOn)
		}
	}
	if script := strings.Join(cb.Command, "\n"); !strings.Contains(script, "/durashuffle") ||
		!strings.Contains(script, "http://minio:9000") || !strings.Contains(script, "http://localstack:4566") {
		t.Errorf("create-buckets does not create bucket durashuffle on both servers:\n%s", script)
	}
}
