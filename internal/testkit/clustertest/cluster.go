package clustertest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Cluster is a distributed MinIO of len(Nodes) server processes on
// loopback, each with one drive (a directory) of its own. Methods are
// safe for concurrent use.
type Cluster struct {
	bin   string
	dir   string
	env   []string
	args  []string // the drive endpoints every node is started with
	mu    sync.Mutex
	nodes []*node
}

type node struct {
	addr, console, data, log string
	cmd                      *exec.Cmd
	exited                   chan struct{} // closed when cmd has been waited for
}

// Start starts n MinIO servers (bin) as one cluster with their drives
// and logs under dir, with the given root credentials, and waits until
// the cluster accepts writes. A start that fails because a port picked
// as free was taken is retried with new ports.
func Start(bin, dir string, n int, user, password string) (*Cluster, error) {
	var errs []error
	for attempt := 1; attempt <= 3; attempt++ {
		c, err := start(bin, filepath.Join(dir, fmt.Sprintf("try-%d", attempt)), n, user, password)
		if err == nil {
			return c, nil
		}
		errs = append(errs, fmt.Errorf("attempt %d: %w", attempt, err))
	}
	return nil, errors.Join(errs...)
}

func start(bin, dir string, n int, user, password string) (*Cluster, error) {
	ports, err := freePorts(2 * n)
	if err != nil {
		return nil, err
	}
	c := &Cluster{bin: bin, dir: dir}
	c.env = append(os.Environ(),
		"MINIO_ROOT_USER="+user,
		"MINIO_ROOT_PASSWORD="+password,
		"MINIO_UPDATE=off",
		"MINIO_BROWSER=off",
		// Drives on the root filesystem are refused in distributed mode
		// unless this is set.
		"MINIO_CI_CD=on",
	)
	for i := range n {
		nd := &node{
			addr:    fmt.Sprintf("127.0.0.1:%d", ports[i]),
			console: fmt.Sprintf("127.0.0.1:%d", ports[n+i]),
			data:    filepath.Join(dir, fmt.Sprintf("drive%d", i+1)),
			log:     filepath.Join(dir, fmt.Sprintf("node%d.log", i+1)),
		}
		if err := os.MkdirAll(nd.data, 0o755); err != nil {
			return nil, err
		}
		c.nodes = append(c.nodes, nd)
		c.args = append(c.args, "http://"+nd.addr+nd.data)
	}
	for i := range c.nodes {
		if err := c.startNode(i); err != nil {
			c.Stop()
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := c.WaitWritable(ctx, 0); err != nil {
		c.Stop()
		return nil, fmt.Errorf("cluster not writable: %w\n%s", err, c.LogTail(0))
	}
	return c, nil
}

// freePorts picks n distinct free loopback ports (a port can still be
// taken before MinIO binds it; Start then retries).
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func (c *Cluster) startNode(i int) error {
	nd := c.nodes[i]
	log, err := os.OpenFile(nd.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	args := append([]string{"server", "--address", nd.addr, "--console-address", nd.console}, c.args...)
	cmd := exec.Command(c.bin, args...)
	// In a container (/.dockerenv) MinIO will not take a loopback address
	// for its own endpoint and waits for DNS to say otherwise, forever;
	// naming its endpoint local settles it. Outside containers MinIO
	// ignores the variable.
	cmd.Env = append(c.env, "_MINIO_SERVER_LOCAL="+nd.addr)
	cmd.Stdout, cmd.Stderr = log, log
	// The servers die with the test binary, whatever kills it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start MinIO node %d (%s): %w", i+1, nd.addr, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	c.mu.Lock()
	nd.cmd, nd.exited = cmd, exited
	c.mu.Unlock()
	// An address already in use ends the process at once.
	select {
	case <-exited:
		return fmt.Errorf("MinIO node %d (%s) exited at start:\n%s", i+1, nd.addr, c.LogTail(i))
	case <-time.After(300 * time.Millisecond):
		return nil
	}
}

// Nodes returns the number of servers.
func (c *Cluster) Nodes() int { return len(c.nodes) }

// URL is node i's S3 endpoint (0-based).
func (c *Cluster) URL(i int) string { return "http://" + c.nodes[i].addr }

// Kill sends node i SIGKILL and waits until it is gone: a node lost at
// once, with no chance to finish or refuse what it was doing.
func (c *Cluster) Kill(i int) error {
	c.mu.Lock()
	nd := c.nodes[i]
	cmd, exited := nd.cmd, nd.exited
	c.mu.Unlock()
	if cmd == nil {
		return nil
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill MinIO node %d: %w", i+1, err)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		return fmt.Errorf("MinIO node %d did not exit 10s after SIGKILL", i+1)
	}
	c.mu.Lock()
	nd.cmd = nil
	c.mu.Unlock()
	return nil
}

// Restart starts node i again on its address and drive (after Kill).
func (c *Cluster) Restart(i int) error {
	c.mu.Lock()
	running := c.nodes[i].cmd != nil
	c.mu.Unlock()
	if running {
		return fmt.Errorf("MinIO node %d is running", i+1)
	}
	return c.startNode(i)
}

// Down lists the nodes not running (0-based).
func (c *Cluster) Down() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var down []int
	for i, nd := range c.nodes {
		if nd.cmd == nil {
			down = append(down, i)
		}
	}
	return down
}

// WaitWritable waits until node i says the cluster has write quorum
// (/minio/health/cluster answers 200).
func (c *Cluster) WaitWritable(ctx context.Context, i int) error {
	return c.waitHealth(ctx, i, "/minio/health/cluster")
}

// WaitAllUp restarts every node that is down and waits until each of
// them answers and the cluster has write quorum on every node.
func (c *Cluster) WaitAllUp(ctx context.Context) error {
	for _, i := range c.Down() {
		if err := c.Restart(i); err != nil {
			return err
		}
	}
	for i := range c.nodes {
		if err := c.waitHealth(ctx, i, "/minio/health/cluster"); err != nil {
			return fmt.Errorf("node %d: %w\n%s", i+1, err, c.LogTail(i))
		}
	}
	return nil
}

func (c *Cluster) waitHealth(ctx context.Context, i int, path string) error {
	client := &http.Client{Timeout: 2 * time.Second}
	url := c.URL(i) + path
	var last string
	for {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("GET %s: last answer %s: %w", url, last, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// LogTail returns the last lines of node i's log (MinIO prints no
// credentials in it; lines that name the password are dropped anyway).
func (c *Cluster) LogTail(i int) string {
	b, _ := os.ReadFile(c.nodes[i].log)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	var out []string
	for _, l := range lines {
		if !strings.Contains(strings.ToLower(l), "password") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// Stop kills every node.
func (c *Cluster) Stop() {
	for i := range c.nodes {
		_ = c.Kill(i)
	}
}
