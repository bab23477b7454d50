package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/containerd/errdefs"
	"github.com/containerd/fifo"
	"golang.org/x/sys/unix"
)

// checkOutputURI says whether Start can open `uri`, a process's stdout or
// stderr as containerd names it (`field` names it in the error): "" (none),
// a FIFO's path, fifo://PATH, file://PATH (ctr run --log-uri file://...) or
// binary://PATH?ARGS (a logging program, nerdctl's default). Any other
// scheme is refused, so that a task whose output has nowhere to go is never
// created.
func checkOutputURI(field, uri string) error {
	_, _, err := parseOutputURI(field, uri)
	return err
}

// checkOutputs checks a process's stdout and stderr URIs (checkOutputURI)
// and that a binary:// one is given for both streams alike (containerd
// sets both to the --log-uri): one logging program takes both streams.
func checkOutputs(stdout, stderr string, terminal bool) error {
	if err := checkOutputURI("stdout", stdout); err != nil {
		return err
	}
	if err := checkOutputURI("stderr", stderr); err != nil {
		return err
	}
	ko, _, _ := parseOutputURI("stdout", stdout)
	ke, _, _ := parseOutputURI("stderr", stderr)
	if (ko == "binary" || ke == "binary") && stdout != stderr && !(terminal && ke == "") {
		return fmt.Errorf("stderr: %q: a binary:// log URI takes both streams; stdout and stderr must name the same one (stdout is %q): %w",
			stderr, stdout, errdefs.ErrInvalidArgument)
	}
	return nil
}

func parseOutputURI(field, uri string) (kind, path string, err error) {
	if uri == "" {
		return "", "", nil
	}
	u, perr := url.Parse(uri)
	if perr != nil || u.Scheme == "" {
		return "fifo", uri, nil // a plain path: containerd's FIFO
	}
	switch u.Scheme {
	case "fifo", "file", "binary":
		if !filepath.IsAbs(u.Path) || u.Host != "" {
			return "", "", fmt.Errorf("%s: %q: a %s:// URI needs an absolute path (%s:///PATH): %w",
				field, uri, u.Scheme, u.Scheme, errdefs.ErrInvalidArgument)
		}
		return u.Scheme, u.Path, nil
	}
	return "", "", fmt.Errorf("%s: %q: unknown URI scheme %q (a FIFO path, fifo://, file:// or binary://): %w",
		field, uri, u.Scheme, errdefs.ErrInvalidArgument)
}

// openOutput opens a process's stdout or stderr (checkOutputURI): a FIFO
// for writing (waiting for its reader, as containerd's shims do), or a
// file:// path appended to, created 0600 (its directory 0700) if missing.
// Nil without a URI. The caller closes it. binary:// is openOutputs'.
func openOutput(field, uri string) (io.WriteCloser, error) {
	kind, path, err := parseOutputURI(field, uri)
	if err != nil || kind == "" {
		return nil, err
	}
	switch kind {
	case "fifo":
		return fifo.OpenFifo(context.Background(), path, syscall.O_WRONLY, 0)
	case "binary":
		return nil, fmt.Errorf("%s: %q: a binary:// URI is opened for both streams at once: %w", field, uri, errdefs.ErrInvalidArgument)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0700); err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND|syscall.O_CLOEXEC, 0600)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	return fileOutput{f}, nil
}

// openOutputs opens a process's stdout and stderr (stderr not when
// terminal: a tty has one stream). A binary:// stdout starts its logging
// program (startLogger) for both; else each is openOutput's. On error
// nothing stays open. The caller closes both writers (a nil one is none).
func openOutputs(id, ns, stdoutURI, stderrURI string, terminal bool) (stdout, stderr io.WriteCloser, err error) {
	if kind, _, _ := parseOutputURI("stdout", stdoutURI); kind == "binary" {
		return startLogger(id, ns, stdoutURI, !terminal)
	}
	if stdout, err = openOutput("stdout", stdoutURI); err != nil {
		return nil, nil, err
	}
	if !terminal {
		if stderr, err = openOutput("stderr", stderrURI); err != nil {
			if stdout != nil {
				stdout.Close()
			}
			return nil, nil, err
		}
	}
	return stdout, stderr, nil
}

// fileOutput is a file:// output. It hides the file's fd from waitDrained:
// a regular file has no reader to wait for (and FIONREAD on it counts the
// bytes past its offset, which the other stream's appends make non-zero).
type fileOutput struct{ f *os.File }

func (o fileOutput) Write(b []byte) (int, error) { return o.f.Write(b) }
func (o fileOutput) Close() error                { return o.f.Close() }

// loggerReadyWait bounds how long Start waits for a logging program to
// say it is ready; loggerTermWait how long it is given to finish after
// its pipes are closed (EOF) before SIGTERM, and after SIGTERM before
// SIGKILL (containerd's runc shim gives 12 s after SIGTERM).
const (
	loggerReadyWait = 30 * time.Second
	loggerTermWait  = 12 * time.Second
)

// logger is a binary:// logging program: containerd's shim logging
// protocol (containerd runtime/v2/logging, as pkg/process NewBinaryIO
// starts it for the runc shim): the program at the URI's path with the
// URI's query as arguments (each key, then its first value if any), an
// environment of only CONTAINER_ID and CONTAINER_NAMESPACE, the read ends
// of a stdout pipe as fd 3 and a stderr pipe as fd 4, and the write end of
// a ready pipe as fd 5, which it closes once ready.
type logger struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	open   int           // writers not closed yet
	exited chan struct{} // closed once the program has exited (reaped)
}

// loggerOutput is one stream's write end of a logger's pipe. Its fd is
// visible to waitDrained (SyscallConn), so the exit waits for the logger
// to have read the output.
type loggerOutput struct {
	*os.File
	lg   *logger
	once sync.Once
}

func (o *loggerOutput) Close() error {
	err := o.File.Close()
	o.once.Do(o.lg.release)
	return err
}

// startLogger starts the logging program of binary:// URI uri for
// container id of containerd namespace ns (logger) and waits, up to
// loggerReadyWait, for it to be ready. Returns the write ends of its
// stdout and (withStderr) stderr pipes; closing both ends the program
// (EOF, then SIGTERM and SIGKILL if it lingers). Errors name stdout and
// the URI.
func startLogger(id, ns, uri string, withStderr bool) (stdout, stderr io.WriteCloser, err error) {
	u, _ := url.Parse(uri)
	var args []string
	q := u.Query()
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	sort.Strings(keys) // containerd takes Go's map order; a stable one here
	for _, k := range keys {
		args = append(args, k)
		if vs := q[k]; len(vs) > 0 {
			args = append(args, vs[0])
		}
	}
	var files []*os.File
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("stdout: %q: %w", uri, err)
	}
	files = append(files, outR, outW)
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll()
		return nil, nil, fmt.Errorf("stdout: %q: %w", uri, err)
	}
	files = append(files, errR, errW)
	readyR, readyW, err := os.Pipe()
	if err != nil {
		closeAll()
		return nil, nil, fmt.Errorf("stdout: %q: %w", uri, err)
	}
	defer readyR.Close()
	cmd := &exec.Cmd{Path: u.Path, Args: append([]string{u.Path}, args...),
		Env:        []string{"CONTAINER_ID=" + id, "CONTAINER_NAMESPACE=" + ns},
		ExtraFiles: []*os.File{outR, errR, readyW}}
	err = cmd.Start()
	readyW.Close()
	outR.Close()
	errR.Close()
	if err != nil {
		outW.Close()
		errW.Close()
		return nil, nil, fmt.Errorf("stdout: %q: starting the logging program: %w", uri, err)
	}
	lg := &logger{cmd: cmd, exited: make(chan struct{})}
	go func() {
		cmd.Wait()
		close(lg.exited)
	}()
	// Ready: the program closed fd 5 (EOF here) or exited.
	readyR.SetReadDeadline(time.Now().Add(loggerReadyWait))
	var b [1]byte
	_, rerr := readyR.Read(b[:])
	if rerr != nil && rerr != io.EOF {
		outW.Close()
		errW.Close()
		cmd.Process.Kill()
		return nil, nil, fmt.Errorf("stdout: %q: the logging program did not get ready (closing fd 5) within %v: %w", uri, loggerReadyWait, rerr)
	}
	gone := false
	select {
	case <-lg.exited:
		gone = true
	default:
		// A program that exited closed its stdout pipe too: no reader.
		if rc, err := outW.SyscallConn(); err == nil {
			rc.Control(func(fd uintptr) {
				pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
				if n, err := unix.Poll(pfd, 0); err == nil && n == 1 && pfd[0].Revents&unix.POLLERR != 0 {
					gone = true
				}
			})
		}
	}
	if gone {
		outW.Close()
		errW.Close()
		cmd.Process.Kill()
		return nil, nil, fmt.Errorf("stdout: %q: the logging program exited at start (or closed its fd 3): %w", uri, errdefs.ErrUnavailable)
	}
	lg.open = 1
	so := &loggerOutput{File: outW, lg: lg}
	if !withStderr {
		errW.Close()
		return so, nil, nil
	}
	lg.open = 2
	return so, &loggerOutput{File: errW, lg: lg}, nil
}

// release is a writer's close: once both are closed the program has its
// EOF; it is given loggerTermWait to exit, then SIGTERM, then SIGKILL.
func (lg *logger) release() {
	lg.mu.Lock()
	lg.open--
	last := lg.open == 0
	lg.mu.Unlock()
	if !last {
		return
	}
	go func() {
		for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
			select {
			case <-lg.exited:
				return
			case <-time.After(loggerTermWait):
			}
			lg.cmd.Process.Signal(sig)
		}
	}()
}

// wait returns once the program has exited (bounded: release kills it
// after twice loggerTermWait).
func (lg *logger) wait() { <-lg.exited }

// outputLogger is the logger behind a process's stdout writer, if any.
func outputLogger(w io.WriteCloser) *logger {
	if o, ok := w.(*loggerOutput); ok {
		return o.lg
	}
	return nil
}
