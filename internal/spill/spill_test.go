package spill

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// TestMain lets the test binary play a process that opens a spill
// directory, writes a file and waits to be killed.
func TestMain(m *testing.M) {
	if root := os.Getenv("SPILL_TEST_CHILD"); root != "" {
		d, err := Open(root, 1<<20)
		if err != nil {
			os.Stdout.WriteString("error " + err.Error() + "\n")
			os.Exit(1)
		}
		f := d.Create()
		if _, err := f.Append([]byte("a run")); err != nil {
			os.Stdout.WriteString("error " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Stdout.WriteString(d.Path() + "\n")
		select {} // until killed
	}
	os.Exit(m.Run())
}

// TestKilledProcessSpillRemoved: a process killed with SIGKILL leaves its
// spill behind; the next process to open the same spill_dir removes it,
// and leaves a live process's directory alone.
func TestKilledProcessSpillRemoved(t *testing.T) {
	root := t.TempDir()
	live, err := Open(root, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SPILL_TEST_CHILD="+root)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.HasPrefix(line, "error") {
		cmd.Process.Kill()
		t.Fatalf("child: %q, %v", line, err)
	}
	dead := strings.TrimSpace(line)
	// While the child lives, its directory is not taken for dead.
	if n := RemoveDead(root); n != 0 {
		t.Fatalf("RemoveDead removed %d directories of live processes", n)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if files, _ := filepath.Glob(filepath.Join(dead, "*.spill")); len(files) != 1 {
		t.Fatalf("the killed process left %v, want its one spill file", files)
	}
	next, err := Open(root, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Fatalf("the killed process's spill %s is still there after the next Open (%v)", dead, err)
	}
	if _, err := os.Stat(live.Path()); err != nil {
		t.Fatalf("a live process's spill was removed: %v", err)
	}
}

// TestLimitAndRemove: the limit spans the process's files, an Append
// past it fails naming the directory, the bytes and the limit, and
// Remove gives the bytes back.
func TestLimitAndRemove(t *testing.T) {
	root := t.TempDir()
	d, err := Open(root, 100)
	if err != nil {
		t.Fatal(err)
	}
	a, b := d.Create(), d.Create()
	if _, err := a.Append(make([]byte, 60)); err != nil {
		t.Fatal(err)
	}
	_, err = b.Append(make([]byte, 41))
	if !errors.Is(err, ErrLimit) {
		t.Fatalf("append past the limit: %v, want ErrLimit", err)
	}
	for _, s := range []string{root, "41 more bytes", "60 bytes", "100-byte limit", "spill_bytes"} {
		if !strings.Contains(err.Error(), s) {
			t.Fatalf("error %q does not name %q", err, s)
		}
	}
	off, err := b.Append(make([]byte, 40))
	if err != nil || off != 0 {
		t.Fatalf("append within the limit: offset %d, %v", off, err)
	}
	got := make([]byte, 40)
	if err := b.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	name := a.Name()
	a.Remove()
	if _, err := os.Stat(name); !os.IsNotExist(err) {
		t.Fatalf("removed file %s still there: %v", name, err)
	}
	if d.Used() != 40 {
		t.Fatalf("used %d bytes after a removal, want 40", d.Used())
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(d.Path()); !os.IsNotExist(err) {
		t.Fatalf("closed directory %s still there", d.Path())
	}
	if _, err := b.Append([]byte("x")); err == nil {
		t.Fatal("append after Close succeeded")
	}
}

// TestUnwritableRoot: a spill_dir that cannot be made fails Open naming
// it.
func TestUnwritableRoot(t *testing.T) {
	file := filepath.Join(t.TempDir(), "not-a-dir")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Open(filepath.Join(file, "spill"), 1<<20)
	if err == nil || !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), "spill_dir") {
		t.Fatalf("Open under a file: %v, want an error naming spill_dir and %s", err, file)
	}
}

// TestDiskFull: a write the disk refuses fails naming the file, the
// directory and the bytes, wraps the system's error, and counts nothing.
func TestDiskFull(t *testing.T) {
	d, err := Open(t.TempDir(), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	f := d.Create()
	if _, err := f.Append([]byte("first")); err != nil {
		t.Fatal(err)
	}
	// The same file, as a disk with no room left answers.
	f.wr = fullDisk{}
	_, err = f.Append(make([]byte, 4096))
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("append to a full disk: %v, want ENOSPC", err)
	}
	for _, s := range []string{f.Name(), "4096 bytes", d.Root(), "spill_dir"} {
		if !strings.Contains(err.Error(), s) {
			t.Fatalf("error %q does not name %q", err, s)
		}
	}
	if d.Used() != 5 {
		t.Fatalf("used %d bytes after a refused write, want the 5 written before", d.Used())
	}
	f.Remove()
}

// fullDisk answers every write as a disk with no room left does.
type fullDisk struct{}

func (fullDisk) WriteAt([]byte, int64) (int, error) {
	return 0, &os.PathError{Op: "write", Path: "spill", Err: syscall.ENOSPC}
}

// TestCreateSized: a sized file counts its bytes against the limit when
// made, is written in place at any offset and read back in sections,
// refuses appends and writes outside it, and gives its bytes back when
// removed; one over the limit fails naming it and makes no file.
func TestCreateSized(t *testing.T) {
	d, err := Open(t.TempDir(), 100)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	f, err := d.CreateSized(60, "task 3")
	if err != nil {
		t.Fatal(err)
	}
	if d.Used() != 60 {
		t.Fatalf("used %d bytes, want 60", d.Used())
	}
	if _, err := f.WriteAt([]byte("tail"), 56); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("head"), 0); err != nil {
		t.Fatal(err)
	}
	sec, err := f.Section(0, 60)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(sec)
	if err != nil || len(got) != 60 || string(got[:4]) != "head" || string(got[56:]) != "tail" {
		t.Fatalf("read back %q, %v", got, err)
	}
	if _, err := f.WriteAt([]byte("xx"), 59); err == nil {
		t.Fatal("a write past the file's end succeeded")
	}
	if _, err := f.Append([]byte("x")); err == nil {
		t.Fatal("an append to a sized file succeeded")
	}
	_, err = d.CreateSized(41, "task 4")
	if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "task 4") || !strings.Contains(err.Error(), "41 more bytes") {
		t.Fatalf("a sized file past the limit: %v, want ErrLimit naming task 4 and 41 bytes", err)
	}
	if objs, _ := filepath.Glob(filepath.Join(d.Path(), "object-*")); len(objs) != 1 {
		t.Fatalf("sized files %v in the directory, want the one made", objs)
	}
	f.wr = fullDisk{}
	if _, err := f.WriteAt([]byte("x"), 10); !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "spill_dir") {
		t.Fatalf("a write to a full disk: %v, want ENOSPC naming spill_dir", err)
	}
	f.Remove()
	if d.Used() != 0 {
		t.Fatalf("used %d bytes after the removal, want 0", d.Used())
	}
}

// TestAppendVec: AppendVec writes its slices back to back at the file's
// end, as one Append of them joined would: empty slices, and more slices
// than one vectored write takes (2,500, past IOV_MAX), included; a disk
// that refuses fails it as it fails Append, counting nothing.
func TestAppendVec(t *testing.T) {
	d, err := Open(t.TempDir(), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	f := d.Create()
	if _, err := f.Append([]byte("head")); err != nil {
		t.Fatal(err)
	}
	var bufs [][]byte
	for i := range 2500 {
		bufs = append(bufs, bytes.Repeat([]byte{byte(i)}, i%7))
	}
	want := bytes.Join(bufs, nil)
	off, err := f.AppendVec(slices.Clone(bufs), int64(len(want)))
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(want))
	if err := f.ReadAt(got, off); err != nil {
		t.Fatal(err)
	}
	if off != 4 || !bytes.Equal(got, want) || f.Size() != int64(4+len(want)) || d.Used() != f.Size() {
		t.Fatalf("at %d, read back equal %v, size %d, used %d; want at 4 the %d bytes joined", off, bytes.Equal(got, want), f.Size(), d.Used(), len(want))
	}
	f.wr = fullDisk{}
	_, err = f.AppendVec([][]byte{make([]byte, 100), make([]byte, 28)}, 128)
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "128 bytes") || !strings.Contains(err.Error(), "spill_dir") {
		t.Fatalf("a vectored append to a full disk: %v, want ENOSPC naming 128 bytes and spill_dir", err)
	}
	if d.Used() != f.Size() {
		t.Fatalf("used %d bytes after a refused write, want the %d written before", d.Used(), f.Size())
	}
	f.Remove()
}
