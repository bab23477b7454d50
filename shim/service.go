package main

// The shim v2 Task service (containerd's runtime/v2/task API) for one
// container, carried out by sandboxd: the container is a sandbox, its init
// process and each exec a command in it (docs/API.md command.run).

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	eventstypes "github.com/containerd/containerd/api/events"
	"github.com/containerd/containerd/api/types/task"
	"github.com/containerd/containerd/errdefs"
	"github.com/containerd/containerd/log"
	"github.com/containerd/containerd/mount"
	"github.com/containerd/containerd/namespaces"
	"github.com/containerd/containerd/pkg/shutdown"
	"github.com/containerd/containerd/runtime"
	"github.com/containerd/containerd/runtime/v2/shim"
	taskAPI "github.com/containerd/containerd/runtime/v2/task"
	"github.com/containerd/fifo"
	"github.com/containerd/typeurl"
	ptypes "github.com/gogo/protobuf/types"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

const rootfsTar = "sandboxd-rootfs.tar"

// note is a command.output or command.exit notification.
type note struct {
	Method   string
	CmdID    string `json:"cmdId"`
	Stream   string `json:"stream"`
	Data     string `json:"data"`
	ExitCode *int   `json:"exitCode"`
	// The OOM killer ended it (at its container's or sandbox's memory
	// limit): containerd is told (TaskOOM) before its exit.
	OOMKilled bool `json:"oomKilled"`
}

// process is the init process ("" exec id) or an exec.
type process struct {
	execID   string
	spec     *specs.Process
	terminal bool
	stdin    string
	stdout   string
	stderr   string

	cmdID      string
	status     task.Status
	exitStatus uint32
	exitedAt   time.Time
	exited     chan struct{}
	// Output waiting for the FIFOs (guarded by service.mu): the RPC
	// reader never blocks on a FIFO nobody reads; past maxQueued bytes
	// further output of the process is dropped (and counted).
	queue     []note
	queued    int
	dropped   int64
	wake      chan struct{}
	ended     bool          // command.exit seen: the writer reports it once the queue is written
	exitCode  uint32        // its exit status
	oomKilled bool          // the OOM killer ended it
	stdinW    io.Closer     // the stdin FIFO's reader
	stdinDone chan struct{} // closed when its copy has ended (EOF)
	stdinWake int           // write end of the copy's wake-up pipe (-1: none)
	stdinEnd  int32         // atomic; 1: CloseIO or exit: copy what the FIFO holds, then end
	// Output bytes queued so far per stream ("stdout", "stderr"): after a
	// sandboxd restart, command.logs is followed after these.
	seen      map[string]int
	following bool    // follow runs (a reconnection: no live notes come for it)
	logger    *logger // a binary:// output's logging program (logio.go), or nil
}

type service struct {
	mu        sync.Mutex
	ctx       context.Context
	publisher shim.Publisher
	sd        shutdown.Service

	id, bundle, ns, name string
	persistent           bool
	pod                  bool   // a CRI pod's sandbox container (pod.go): the pod's sandbox, nothing runs
	member               bool   // a CRI pod's container (pod.go): a container of the pod's sandbox
	ctr                  string // a pod's container: its sandboxd container (and runtime) name; "" otherwise
	mountedRootfs        bool
	rpc                  *rpcClient
	init                 *process
	procs                map[string]*process // by exec id
	byCmd                map[string]*process
	pending              map[string][]note // notes for a cmdId not known yet
	pendingBytes         int
	deleted              bool
}

func newService(ctx context.Context, publisher shim.Publisher, sd shutdown.Service) (*service, error) {
	ns, _ := namespaces.Namespace(ctx)
	s := &service{ctx: ctx, publisher: publisher, sd: sd, ns: ns,
		procs: map[string]*process{}, byCmd: map[string]*process{}, pending: map[string][]note{}}
	c, err := dialRPCReconnecting(socketPath(), s.onNote, s.resume)
	if err != nil {
		return nil, err
	}
	s.rpc = c
	sd.RegisterCallback(func(context.Context) error {
		c.close()
		publisher.Close() // events are sent in order; the shim then exits at once
		return nil
	})
	return s, nil
}

// RegisterTTRPC makes the service the shim's task service.
func (s *service) RegisterTTRPC(server *ttrpcServer) error {
	taskAPI.RegisterTaskService(server, s)
	return nil
}

func (s *service) publish(topic string, ev interface{}) {
	ctx := namespaces.WithNamespace(context.Background(), s.ns)
	if err := s.publisher.Publish(ctx, topic, ev.(eventsEvent)); err != nil {
		log.G(s.ctx).WithError(err).Warnf("publishing %s", topic)
	}
}

// maxQueued bounds the output a process may have waiting for its FIFO
// reader, and the notes waiting for a cmdId command.run has not answered.
const maxQueued = 16 << 20

// onNote runs on the RPC reader and never blocks: output and exit are
// queued for the process's writer (pump), so a FIFO nobody reads holds up
// only that process's output and exit, never the shim's other calls.
func (s *service) onNote(method string, params json.RawMessage) {
	if method != "command.output" && method != "command.exit" {
		return
	}
	var n note
	if json.Unmarshal(params, &n) != nil || n.CmdID == "" {
		return
	}
	n.Method = method
	s.mu.Lock()
	p := s.byCmd[n.CmdID]
	if p == nil {
		if s.pendingBytes+len(n.Data) <= maxQueued || method == "command.exit" {
			s.pending[n.CmdID] = append(s.pending[n.CmdID], n)
			s.pendingBytes += len(n.Data)
		}
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	s.deliver(p, n)
}

// deliver queues one note of p: output for its FIFOs, or its exit, which
// pump reports once the output before it is written.
func (s *service) deliver(p *process, n note) {
	if n.Method == "command.exit" {
		code := 255
		if n.ExitCode != nil {
			code = *n.ExitCode
		}
		s.mu.Lock()
		p.ended = true
		p.exitCode = uint32(code)
		p.oomKilled = n.OOMKilled
		s.mu.Unlock()
	} else {
		s.mu.Lock()
		countSeen(p, n)
		if p.queued+len(n.Data) > maxQueued {
			p.dropped += int64(len(n.Data)) * 3 / 4
		} else {
			p.queue = append(p.queue, n)
			p.queued += len(n.Data)
		}
		s.mu.Unlock()
	}
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func countSeen(p *process, n note) {
	if p.seen == nil {
		p.seen = map[string]int{}
	}
	p.seen[n.Stream] += base64.StdEncoding.DecodedLen(len(n.Data)) - padding(n.Data)
}

func padding(b64 string) int {
	n := 0
	for i := len(b64) - 1; i >= 0 && b64[i] == '='; i-- {
		n++
	}
	return n
}

// resume runs after the client reconnected to sandboxd (a restart: live
// restore keeps the sandbox and its commands, docs/API.md "Daemon restarts
// (live restore)"): every started process that has not exited is
// followed by polling, as the new connection gets no notes of commands
// run on the old one.
func (s *service) resume() {
	s.mu.Lock()
	var ps []*process
	all := mapValues(s.procs)
	if s.init != nil {
		all = append(all, s.init)
	}
	for _, p := range all {
		if p.cmdID != "" && p.cmdID != "starting" && !p.ended && !p.following {
			p.following = true
			ps = append(ps, p)
		}
	}
	s.mu.Unlock()
	for _, p := range ps {
		go s.follow(p)
	}
}

// followPoll is how often follow reads command.logs.
const followPoll = 100 * time.Millisecond

// follow carries p's output on after the bytes already queued (its
// command.logs, which sandbox-init keeps across restarts, read every
// followPoll) and its exit (command.wait), retrying across further
// connection losses. Output cut from the log (past commandLogBytes of a
// stream) is not recovered.
func (s *service) follow(p *process) {
	exited := make(chan int, 1)
	oom := make(chan bool, 1)
	go func() {
		for {
			var r struct {
				ExitCode  *int `json:"exitCode"`
				OOMKilled bool `json:"oomKilled"`
			}
			err := s.rpc.call("command.wait", map[string]interface{}{"cmdId": p.cmdID}, &r)
			if err == nil || isReason(err, "not_found") {
				code := 255
				if err == nil && r.ExitCode != nil {
					code = *r.ExitCode
				}
				oom <- err == nil && r.OOMKilled
				exited <- code
				return
			}
			select {
			case <-s.rpc.shutCh:
				return
			case <-time.After(followPoll):
			}
		}
	}()
	done, code := false, 255
	for {
		last := done
		var lg struct {
			Stdout string `json:"stdout"`
			Stderr string `json:"stderr"`
		}
		if err := s.rpc.call("command.logs", map[string]interface{}{"cmdId": p.cmdID}, &lg); err == nil {
			for _, st := range []struct{ name, data string }{{"stdout", lg.Stdout}, {"stderr", lg.Stderr}} {
				b, err := base64.StdEncoding.DecodeString(st.data)
				if err != nil {
					continue
				}
				s.mu.Lock()
				seen := 0
				if p.seen != nil {
					seen = p.seen[st.name]
				}
				s.mu.Unlock()
				if len(b) > seen {
					s.deliver(p, note{Method: "command.output", CmdID: p.cmdID, Stream: st.name,
						Data: base64.StdEncoding.EncodeToString(b[seen:])})
				}
			}
		}
		if last {
			killed := false
			select {
			case killed = <-oom:
			default:
			}
			s.deliver(p, note{Method: "command.exit", CmdID: p.cmdID, ExitCode: &code, OOMKilled: killed})
			return
		}
		select {
		case code = <-exited:
			done = true
		case <-s.rpc.shutCh:
			return
		case <-time.After(followPoll):
		}
	}
}

// pump writes a process's output to its FIFOs in order, and closes them
// once the process has exited and everything queued is written.
func (s *service) pump(p *process, conn *rpcClient, stdout, stderr io.WriteCloser) {
	// A lost connection to sandboxd does not end the process: the client
	// reconnects and follow goes on with its output and exit.
	writeFailed := false
	for {
		s.mu.Lock()
		q := p.queue
		p.queue, p.queued = nil, 0
		ended := p.ended
		s.mu.Unlock()
		for _, n := range q {
			data, err := base64.StdEncoding.DecodeString(n.Data)
			if err != nil {
				continue
			}
			w := stdout
			if n.Stream == "stderr" && stderr != nil {
				w = stderr
			}
			if w != nil {
				if _, err := w.Write(data); err != nil && !writeFailed {
					writeFailed = true
					log.G(s.ctx).WithError(err).Warnf("process %q: writing its %s to the FIFO", p.execID, n.Stream)
				}
			}
		}
		if len(q) > 0 {
			continue
		}
		if ended {
			s.mu.Lock()
			code := p.exitCode
			s.mu.Unlock()
			// The exit is reported once the reader has taken the output
			// from the FIFOs: ctr run closes its end when told of the
			// exit, and what was still in the pipe would be lost.
			waitDrained(conn, stdout, stderr)
			s.exit(p, code)
			break
		}
		select {
		case <-p.wake:
		case <-conn.shutCh:
			s.mu.Lock()
			if !p.ended {
				p.ended, p.exitCode = true, 255
			}
			s.mu.Unlock()
		}
	}
	s.mu.Lock()
	dropped := p.dropped
	s.mu.Unlock()
	if dropped > 0 {
		log.G(s.ctx).Warnf("process %q: %d bytes of output dropped: its FIFO reader did not keep up", p.execID, dropped)
	}
	if stdout != nil {
		stdout.Close()
	}
	if stderr != nil {
		stderr.Close()
	}
}

// waitDrained returns once no output waits in any of the FIFOs ws (nil
// entries are skipped): the pipe's unread byte count (FIONREAD, named
// TIOCINQ in x/sys/unix, which a pipe answers on either end; pipe(7)) is
// 0, or it has no reader left (POLLERR on the write end; poll(2)), or the
// daemon's connection conn is gone. Linux has no event for "pipe empty",
// so it polls: at once, then from 1 ms backing off to 50 ms.
func waitDrained(conn *rpcClient, ws ...io.WriteCloser) {
	delay := time.Millisecond
	for {
		waiting := false
		for _, w := range ws {
			if w != nil && unread(w) {
				waiting = true
			}
		}
		if !waiting {
			return
		}
		select {
		case <-conn.shutCh:
			return
		case <-time.After(delay):
		}
		if delay *= 2; delay > 50*time.Millisecond {
			delay = 50 * time.Millisecond
		}
	}
}

// unread says whether the FIFO written through w holds bytes a reader
// still has to take. false when w gives no fd or on any error (nothing is
// waited for that cannot be seen).
func unread(w io.WriteCloser) bool {
	sc, ok := w.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	waiting := false
	rc.Control(func(fd uintptr) {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
		if n, err := unix.Poll(pfd, 0); err != nil || (n == 1 && pfd[0].Revents&(unix.POLLERR|unix.POLLHUP|unix.POLLNVAL) != 0) {
			return // no reader left: nobody will take it
		}
		n, err := unix.IoctlGetInt(int(fd), unix.TIOCINQ) // FIONREAD
		waiting = err == nil && n > 0
	})
	return waiting
}

func (s *service) exit(p *process, code uint32) {
	s.mu.Lock()
	if p.status == task.StatusStopped {
		s.mu.Unlock()
		return
	}
	p.status = task.StatusStopped
	p.exitStatus = code
	oom := p == s.init && p.oomKilled
	p.exitedAt = time.Now()
	if p.stdinW != nil {
		// The copy ends (the FIFO is cut if it never opened).
		atomic.StoreInt32(&p.stdinEnd, 1)
		wakeStdin(p)
		p.stdinW.Close() // waits for the copy's poll, just woken
		p.stdinW = nil
	}
	close(p.exited)
	var others []string
	if p == s.init {
		// As when a container's init dies: the rest of it goes too.
		for _, q := range s.procs {
			if q.status == task.StatusRunning && q.cmdID != "" {
				others = append(others, q.cmdID)
			}
		}
	}
	s.mu.Unlock()
	for _, c := range others {
		s.rpc.call("command.kill", map[string]interface{}{"cmdId": c, "signal": 9}, nil)
	}
	id := p.execID
	if id == "" {
		id = s.id
	}
	if oom {
		// The CRI reads it as the container's OOM (reason OOMKilled).
		s.publish(runtime.TaskOOMEventTopic, &eventstypes.TaskOOM{ContainerID: s.id})
	}
	s.publish(runtime.TaskExitEventTopic, &eventstypes.TaskExit{
		ContainerID: s.id, ID: id, Pid: uint32(os.Getpid()), ExitStatus: code, ExitedAt: p.exitedAt})
}

func (s *service) limits() (daemonLimits, error) {
	var info struct {
		Limits daemonLimits `json:"limits"`
	}
	err := s.rpc.call("daemon.info", nil, &info)
	return info.Limits, err
}

func grpcErr(err error) error { return errdefs.ToGRPC(err) }

// Create makes the container's sandbox: its rootfs as a runtime, then
// sandbox.create with the parameters the spec maps to (spec.go). A CRI
// pod's sandbox container makes the pod's sandbox (createPod), a pod's
// container joins it (createMember).
func (s *service) Create(ctx context.Context, r *taskAPI.CreateTaskRequest) (_ *taskAPI.CreateTaskResponse, retErr error) {
	s.mu.Lock()
	if s.init != nil {
		s.mu.Unlock()
		return nil, grpcErr(fmt.Errorf("task %s: %w", r.ID, errdefs.ErrAlreadyExists))
	}
	s.id, s.bundle = r.ID, r.Bundle
	s.name = sandboxName(s.ns, r.ID)
	s.mu.Unlock()
	spec, err := readSpec(r.Bundle)
	if err != nil {
		return nil, grpcErr(err)
	}
	if r.Checkpoint != "" {
		return nil, grpcErr(fmt.Errorf("checkpoint: restoring a checkpoint is not supported by sandboxd: %w", errdefs.ErrNotImplemented))
	}
	role, sandboxID, err := podRole(spec)
	if err != nil {
		return nil, grpcErr(err)
	}
	lim, err := s.limits()
	if err != nil {
		return nil, grpcErr(err)
	}
	switch role {
	case containerTypeSandbox:
		return s.createPod(r, spec, sandboxID, lim)
	case containerTypeContainer:
		return s.createMember(r, spec, sandboxID, lim)
	}
	params, persistent, err := createParams(spec, lim)
	if err != nil {
		return nil, grpcErr(fmt.Errorf("%v: %w", err, errdefs.ErrInvalidArgument))
	}
	if err := s.checkProcess(spec, r, lim); err != nil {
		return nil, err
	}
	mounts, netns, err := s.checkMountsNetns(spec, false, false)
	if err != nil {
		return nil, err
	}
	if len(mounts) > 0 {
		params["mounts"] = mounts
	}
	if netns != "" {
		params["network"] = map[string]interface{}{"netns": netns}
	}
	defer func() {
		if retErr != nil {
			s.cleanup()
		}
	}()
	if err := s.importRootfs(r, spec, lim, s.name, mounts); err != nil {
		return nil, err
	}
	params["name"] = s.name
	params["runtime"] = s.name
	if err := s.rpc.call("sandbox.create", params, nil); err != nil {
		return nil, grpcErr(createError(err))
	}
	s.created(r, spec.Process, persistent)
	return &taskAPI.CreateTaskResponse{Pid: uint32(os.Getpid())}, nil
}

// createError marks a sandbox.create refusal of the request as an
// invalid argument, naming the policy annotation for a policy error.
func createError(err error) error {
	err = policyError(err)
	if isReason(err, "invalid_policy") || isRPCCode(err, -32602) {
		err = fmt.Errorf("%v: %w", err, errdefs.ErrInvalidArgument)
	}
	return err
}

// checkProcess checks the init process at Create as command.run will at
// Start (commandParams, checkProcessLimits) and its outputs.
func (s *service) checkProcess(spec *specs.Spec, r *taskAPI.CreateTaskRequest, lim daemonLimits) error {
	if _, err := commandParams(s.name, spec.Process); err != nil {
		return grpcErr(fmt.Errorf("%v: %w", err, errdefs.ErrInvalidArgument))
	}
	if err := checkOutputs(r.Stdout, r.Stderr, r.Terminal); err != nil {
		return grpcErr(err)
	}
	if err := checkProcessLimits(spec.Process, lim); err != nil {
		return grpcErr(fmt.Errorf("%v: %w", err, errdefs.ErrInvalidArgument))
	}
	return nil
}

// checkMountsNetns checks the spec's mounts (specMounts; the bind mounts
// of a pod's sandbox container, which runs nothing, are refused) and
// namespaces (specNetns; podMember: a pod's container, whose namespace
// paths are its pod's). Returns the host bind mounts to apply and the
// network namespace path to join, if any: containerd names it by a path
// through /var/run (a symlink to /run on most systems), which sandboxd,
// following no symlink, refuses, so the path from containerd (root) is
// resolved here.
func (s *service) checkMountsNetns(spec *specs.Spec, pod, podMember bool) ([]hostMount, string, error) {
	mounts, err := specMounts(spec)
	if err == nil && pod {
		err = mountsUnsupported(spec, mounts)
	}
	if err != nil {
		return nil, "", grpcErr(fmt.Errorf("%v: %w", err, errdefs.ErrInvalidArgument))
	}
	netns, err := specNetns(spec, podMember)
	if err != nil {
		return nil, "", grpcErr(fmt.Errorf("%v: %w", err, errdefs.ErrInvalidArgument))
	}
	if netns != "" {
		if real, rerr := filepath.EvalSymlinks(netns); rerr == nil {
			netns = real
		}
	}
	return mounts, netns, nil
}

// importRootfs makes the container's root a runtime named rt: the
// snapshot mounts mounted in the bundle's rootfs (or the spec's
// root.path), packed (rootfs.go) and runtime.import'ed; the mounts are
// released. The caller's cleanup removes what is left on error.
//
// mounts' destinations are rewritten in place to the paths they reach in
// the tree (resolveMountDests), read while it is there.
func (s *service) importRootfs(r *taskAPI.CreateTaskRequest, spec *specs.Spec, lim daemonLimits, rt string, mounts []hostMount) error {
	root := filepath.Join(r.Bundle, "rootfs")
	if len(r.Rootfs) > 0 {
		if err := os.MkdirAll(root, 0711); err != nil {
			return grpcErr(err)
		}
		var ms []mount.Mount
		for _, m := range r.Rootfs {
			ms = append(ms, mount.Mount{Type: m.Type, Source: m.Source, Options: m.Options})
		}
		if err := mount.All(ms, root); err != nil {
			return grpcErr(fmt.Errorf("mounting the rootfs: %w", err))
		}
		s.mountedRootfs = true
	}
	rootPath := "rootfs"
	if len(r.Rootfs) == 0 && spec.Root != nil && spec.Root.Path != "" {
		rootPath = spec.Root.Path
	}
	rfd, err := openRootPath(r.Bundle, rootPath)
	if err != nil {
		return grpcErr(fmt.Errorf("%v: %w", err, errdefs.ErrInvalidArgument))
	}
	resolveMountDests(rfd, mounts)
	tarPath := filepath.Join(r.Bundle, rootfsTar)
	os.Remove(tarPath)
	err = tarTree(rfd, rootPath, tarPath, lim.MaxSourceBytes)
	unix.Close(rfd)
	if err != nil {
		return grpcErr(err)
	}
	if s.mountedRootfs {
		// The runtime is a copy: the snapshot's mounts are not needed.
		mount.UnmountAll(root, 0)
		s.mountedRootfs = false
	}
	err = s.rpc.call("runtime.import", map[string]interface{}{"name": rt, "path": tarPath}, nil)
	os.Remove(tarPath)
	if err != nil {
		return grpcErr(fmt.Errorf("importing the rootfs as runtime %s: %w", rt, err))
	}
	return nil
}

// created records the task's init process (proc: nil for a pod's sandbox
// container, which runs nothing) and publishes TaskCreate.
func (s *service) created(r *taskAPI.CreateTaskRequest, proc *specs.Process, persistent bool) {
	p := &process{spec: proc, terminal: r.Terminal, stdin: r.Stdin, stdout: r.Stdout, stderr: r.Stderr,
		status: task.StatusCreated, exited: make(chan struct{}), wake: make(chan struct{}, 1), stdinWake: -1}
	s.mu.Lock()
	s.init = p
	s.persistent = persistent
	s.mu.Unlock()
	s.publish(runtime.TaskCreateEventTopic, &eventstypes.TaskCreate{
		ContainerID: r.ID, Bundle: r.Bundle, Rootfs: r.Rootfs, Pid: uint32(os.Getpid()),
		IO: &eventstypes.TaskIO{Stdin: r.Stdin, Stdout: r.Stdout, Stderr: r.Stderr, Terminal: r.Terminal}})
}

// createPod is Create for a CRI pod's sandbox container: the pod's
// sandbox, named podSandboxName, on a runtime of the sandbox container's
// rootfs (the pause image), configured by its io.sandboxd.* annotations.
// Nothing of the pause image runs, so the spec's restrictions (the CRI's
// read-only root) restrict nothing that runs and are not looked at; its
// mounts are refused, and its network namespace (the CNI's) is joined.
func (s *service) createPod(r *taskAPI.CreateTaskRequest, spec *specs.Spec, sandboxID string, lim daemonLimits) (_ *taskAPI.CreateTaskResponse, retErr error) {
	s.mu.Lock()
	s.pod = true
	s.name = podSandboxName(s.ns, sandboxID)
	s.mu.Unlock()
	params, persistent, err := annotationParams(spec, lim)
	if err != nil {
		return nil, grpcErr(fmt.Errorf("%v: %w", err, errdefs.ErrInvalidArgument))
	}
	_, netns, err := s.checkMountsNetns(spec, true, false)
	if err != nil {
		return nil, err
	}
	if netns != "" {
		params["network"] = map[string]interface{}{"netns": netns}
	}
	defer func() {
		if retErr != nil {
			s.cleanup()
		}
	}()
	if err := s.importRootfs(r, spec, lim, s.name, nil); err != nil {
		return nil, err
	}
	params["name"] = s.name
	params["runtime"] = s.name
	if err := s.rpc.call("sandbox.create", params, nil); err != nil {
		return nil, grpcErr(createError(err))
	}
	if err := podJoin(s.name, podMemberSandbox); err != nil {
		return nil, grpcErr(err)
	}
	s.created(r, nil, persistent)
	return &taskAPI.CreateTaskResponse{Pid: uint32(os.Getpid())}, nil
}

// createMember is Create for a CRI pod's container: a sandboxd container
// of the pod's sandbox (container.create) on a runtime of its own rootfs,
// named sandboxName, with its read-only root, limits (containerLimits)
// and bind mounts; its processes run in it (command.run container), in
// the pod's network. Its io.sandboxd.* annotations must be the pod's.
func (s *service) createMember(r *taskAPI.CreateTaskRequest, spec *specs.Spec, sandboxID string, lim daemonLimits) (_ *taskAPI.CreateTaskResponse, retErr error) {
	pod, err := podSpec(r.Bundle, sandboxID)
	if err != nil {
		return nil, grpcErr(err)
	}
	if err := checkPodAnnotations(spec, pod); err != nil {
		return nil, grpcErr(err)
	}
	_, persistent, err := annotationParams(pod, lim)
	if err != nil {
		return nil, grpcErr(fmt.Errorf("%v: %w", err, errdefs.ErrInvalidArgument))
	}
	s.mu.Lock()
	s.member = true
	s.name = podSandboxName(s.ns, sandboxID)
	s.mu.Unlock()
	// Its own root (read-only when asked), limits and mounts.
	restr := *spec
	if spec.Root != nil {
		root := *spec.Root
		root.Readonly = false
		restr.Root = &root
	}
	if err := refuseRestrictions(&restr); err != nil {
		return nil, grpcErr(fmt.Errorf("%v: %w", err, errdefs.ErrInvalidArgument))
	}
	params, err := containerLimits(spec, pod.Annotations[annResources] == "round-up")
	if err != nil {
		return nil, grpcErr(fmt.Errorf("%v: %w", err, errdefs.ErrInvalidArgument))
	}
	if spec.Root != nil && spec.Root.Readonly {
		params["readOnlyRoot"] = true
	}
	if err := s.checkProcess(spec, r, lim); err != nil {
		return nil, err
	}
	mounts, _, err := s.checkMountsNetns(spec, false, true)
	if err != nil {
		return nil, err
	}
	pidns, err := specPidNamespace(spec)
	if err != nil {
		return nil, grpcErr(fmt.Errorf("%v: %w", err, errdefs.ErrInvalidArgument))
	}
	params["pidNamespace"] = pidns
	if err := s.rpc.call("sandbox.get", map[string]interface{}{"name": s.name}, nil); err != nil {
		return nil, grpcErr(fmt.Errorf("the pod's sandbox %s (of sandbox container %s): %w", s.name, sandboxID, err))
	}
	ctr := sandboxName(s.ns, r.ID)
	s.mu.Lock()
	s.ctr = ctr
	s.mu.Unlock()
	defer func() {
		if retErr != nil {
			s.deleteContainer()
			if s.mountedRootfs {
				mount.UnmountAll(filepath.Join(r.Bundle, "rootfs"), 0)
				s.mountedRootfs = false
			}
		}
	}()
	if err := s.importRootfs(r, spec, lim, ctr, mounts); err != nil {
		return nil, err
	}
	params["sandbox"], params["name"], params["runtime"] = s.name, ctr, ctr
	if len(mounts) > 0 {
		params["mounts"] = mounts
	}
	if err := s.rpc.call("container.create", params, nil); err != nil {
		return nil, grpcErr(createError(err))
	}
	if err := podJoin(s.name, r.ID); err != nil {
		return nil, grpcErr(err)
	}
	s.created(r, spec.Process, persistent)
	return &taskAPI.CreateTaskResponse{Pid: uint32(os.Getpid())}, nil
}

// notForPod refuses `what` on a pod's sandbox container, which has no
// sandbox (pod.go).
func (s *service) notForPod(what string) error {
	s.mu.Lock()
	pod := s.pod
	s.mu.Unlock()
	if pod {
		return grpcErr(fmt.Errorf("%s: a pod's sandbox container (annotation %s: %s) runs nothing in io.containerd.sandboxd.v2: %w",
			what, annContainerType, containerTypeSandbox, errdefs.ErrNotImplemented))
	}
	return nil
}

// deleteContainer removes a pod's container's sandboxd container and
// its runtime (none: nothing to do). not_found is no error.
func (s *service) deleteContainer() error {
	s.mu.Lock()
	ctr := s.ctr
	s.mu.Unlock()
	if ctr == "" {
		return nil
	}
	if err := s.rpc.call("container.delete", map[string]interface{}{"sandbox": s.name, "name": ctr}, nil); err != nil && !isReason(err, "not_found") {
		return err
	}
	if err := s.rpc.call("runtime.delete", map[string]interface{}{"name": ctr}, nil); err != nil && !isReason(err, "not_found") {
		return err
	}
	return nil
}

// notForMember refuses `what` on a CRI pod's container, a command of
// its pod's sandbox (pod.go).
func (s *service) notForMember(what string) error {
	s.mu.Lock()
	member := s.member
	s.mu.Unlock()
	if member {
		return grpcErr(fmt.Errorf("%s: a pod's container (annotation %s: %s) is a process of the pod's sandbox in %s: %w",
			what, annContainerType, containerTypeContainer, runtimeName, errdefs.ErrNotImplemented))
	}
	return nil
}

func isRPCCode(err error, code int) bool {
	if re, ok := err.(*rpcError); ok {
		return re.Code == code
	}
	return false
}

func readSpec(bundle string) (*specs.Spec, error) {
	b, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		return nil, err
	}
	var spec specs.Spec
	if err := json.Unmarshal(b, &spec); err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	return &spec, nil
}

// cleanup removes what Create made: the sandbox, its runtime, the rootfs
// mounts. Errors other than not_found are returned.
func (s *service) cleanup() error {
	var first error
	if err := s.rpc.call("sandbox.delete", map[string]interface{}{"name": s.name}, nil); err != nil && !isReason(err, "not_found") {
		first = err
	}
	if err := s.rpc.call("runtime.delete", map[string]interface{}{"name": s.name}, nil); err != nil && !isReason(err, "not_found") && first == nil {
		first = err
	}
	if s.mountedRootfs {
		mount.UnmountAll(filepath.Join(s.bundle, "rootfs"), 0)
		s.mountedRootfs = false
	}
	os.Remove(filepath.Join(s.bundle, rootfsTar))
	return first
}

func (s *service) get(execID string) (*process, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.init == nil {
		return nil, grpcErr(fmt.Errorf("no task: %w", errdefs.ErrNotFound))
	}
	if execID == "" {
		return s.init, nil
	}
	p := s.procs[execID]
	if p == nil {
		return nil, grpcErr(fmt.Errorf("exec %s: %w", execID, errdefs.ErrNotFound))
	}
	return p, nil
}

// Start runs the process as a detached command of the sandbox with its
// stdio on containerd's FIFOs.
func (s *service) Start(ctx context.Context, r *taskAPI.StartRequest) (*taskAPI.StartResponse, error) {
	p, err := s.get(r.ExecID)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if p.status != task.StatusCreated || p.cmdID != "" {
		s.mu.Unlock()
		return nil, grpcErr(fmt.Errorf("process already started: %w", errdefs.ErrFailedPrecondition))
	}
	if s.pod {
		// The pod's sandbox container runs nothing (pod.go).
		p.status = task.StatusRunning
		s.mu.Unlock()
		s.publish(runtime.TaskStartEventTopic, &eventstypes.TaskStart{ContainerID: s.id, Pid: uint32(os.Getpid())})
		return &taskAPI.StartResponse{Pid: uint32(os.Getpid())}, nil
	}
	p.cmdID = "starting"
	s.mu.Unlock()
	params, err := commandParams(s.name, p.spec)
	if err != nil {
		return nil, s.failStart(p, err)
	}
	if s.ctr != "" {
		params["container"] = s.ctr
	}
	if p.terminal {
		params["tty"] = true
	}
	var stdout, stderr io.WriteCloser
	closeOut := func() {
		for _, w := range []io.WriteCloser{stdout, stderr} {
			if w != nil {
				w.Close()
			}
		}
	}
	if stdout, stderr, err = openOutputs(s.id, s.ns, p.stdout, p.stderr, p.terminal); err != nil {
		return nil, s.failStart(p, err)
	}
	s.mu.Lock()
	p.logger = outputLogger(stdout)
	s.mu.Unlock()
	var cmd struct {
		CmdID string `json:"cmdId"`
	}
	if err := s.rpc.call("command.run", params, &cmd); err != nil {
		closeOut()
		return nil, s.failStart(p, err)
	}
	s.mu.Lock()
	p.cmdID = cmd.CmdID
	p.status = task.StatusRunning
	// The notes that came before the answer go first, in order, under the
	// same lock that makes the live ones find the process.
	var exitNote *note
	for _, n := range s.pending[cmd.CmdID] {
		s.pendingBytes -= len(n.Data)
		if n.Method == "command.exit" {
			n := n
			exitNote = &n
		} else {
			countSeen(p, n)
			p.queue = append(p.queue, n)
			p.queued += len(n.Data)
		}
	}
	delete(s.pending, cmd.CmdID)
	s.byCmd[cmd.CmdID] = p
	member := s.member && r.ExecID == ""
	s.mu.Unlock()
	if member {
		if err := podRecordCmd(s.name, s.id, cmd.CmdID); err != nil {
			log.G(s.ctx).WithError(err).Warn("recording the command in the pod's state")
		}
	}
	if exitNote != nil {
		s.deliver(p, *exitNote)
	}
	go s.pump(p, s.rpc, stdout, stderr)
	s.startStdin(p)
	if r.ExecID == "" {
		s.publish(runtime.TaskStartEventTopic, &eventstypes.TaskStart{ContainerID: s.id, Pid: uint32(os.Getpid())})
	} else {
		s.publish(runtime.TaskExecStartedEventTopic, &eventstypes.TaskExecStarted{ContainerID: s.id, ExecID: r.ExecID, Pid: uint32(os.Getpid())})
	}
	return &taskAPI.StartResponse{Pid: uint32(os.Getpid())}, nil
}

// failStart ends a process whose Start failed with `err` (returned as the
// gRPC error): it is STOPPED with exit status 128 (as the CRI reports a
// start error) and its TaskExit published, so Wait returns, Kill finds it
// finished and Delete (with or without --force) removes it at once. Before,
// it stayed CREATED with a command id of "starting" that no Kill or Delete
// could end.
func (s *service) failStart(p *process, err error) error {
	s.mu.Lock()
	p.cmdID = ""
	s.mu.Unlock()
	s.exit(p, 128)
	return grpcErr(err)
}

// startStdin copies the stdin FIFO to command.write; its end (EOF, or
// CloseIO: what the FIFO holds then, then the end) is command.closeStdin.
// Without a stdin FIFO stdin is closed at once.
func (s *service) startStdin(p *process) {
	closeStdin := func() {
		s.rpc.call("command.closeStdin", map[string]interface{}{"cmdId": p.cmdID}, nil)
	}
	if p.stdin == "" {
		closeStdin()
		return
	}
	in, err := fifo.OpenFifo(context.Background(), p.stdin, syscall.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		closeStdin()
		return
	}
	var wake [2]int
	if err := unix.Pipe2(wake[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		in.Close()
		closeStdin()
		return
	}
	done := make(chan struct{})
	s.mu.Lock()
	p.stdinW, p.stdinDone, p.stdinWake = in, done, wake[1]
	s.mu.Unlock()
	go func() {
		defer close(done)
		buf := make([]byte, 64<<10)
		for {
			n, eof := s.readStdin(p, in, wake[0], buf)
			if n > 0 {
				if s.rpc.call("command.write", map[string]interface{}{"cmdId": p.cmdID,
					"data": base64.StdEncoding.EncodeToString(buf[:n])}, nil) != nil {
					break
				}
			}
			if eof {
				break
			}
		}
		s.mu.Lock()
		unix.Close(wake[1])
		p.stdinWake = -1
		s.mu.Unlock()
		unix.Close(wake[0])
		in.Close()
		closeStdin()
	}()
}

// wakeStdin wakes p's stdin copy (to see stdinEnd). Called with s.mu held.
func wakeStdin(p *process) {
	if p.stdinWake >= 0 {
		unix.Write(p.stdinWake, []byte{0})
	}
}

// readStdin reads what the stdin FIFO in holds into buf, waiting (poll(2)
// on it and on the wake-up pipe wake) while it is empty. eof: the FIFO's
// writers have all closed it, or stdinEnd is set and the FIFO is empty (a
// client such as ctr asks for CloseIO while it still holds its end open,
// its last input already in the pipe), or the FIFO cannot be read.
func (s *service) readStdin(p *process, in io.ReadWriteCloser, wake int, buf []byte) (n int, eof bool) {
	sc, ok := in.(syscall.Conn)
	if !ok {
		return 0, true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0, true
	}
	for {
		var rerr error
		again := false
		cerr := rc.Control(func(fd uintptr) {
			n, rerr = unix.Read(int(fd), buf)
			if rerr != unix.EAGAIN {
				return
			}
			// Not s.mu: exit closes the FIFO holding it, which waits
			// for this callback.
			if atomic.LoadInt32(&p.stdinEnd) != 0 {
				return
			}
			pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}, {Fd: int32(wake), Events: unix.POLLIN}}
			unix.Poll(pfd, -1)
			if pfd[1].Revents != 0 {
				var b [64]byte
				unix.Read(wake, b[:])
			}
			again = true
		})
		switch {
		case cerr != nil:
			return 0, true
		case again || rerr == unix.EINTR:
			continue
		case rerr == unix.EAGAIN: // empty, and stdinEnd
			return 0, true
		case rerr != nil:
			return 0, true
		case n == 0: // every writer closed it
			return 0, true
		}
		return n, false
	}
}

func (s *service) State(ctx context.Context, r *taskAPI.StateRequest) (*taskAPI.StateResponse, error) {
	p, err := s.get(r.ExecID)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return &taskAPI.StateResponse{ID: s.id, Bundle: s.bundle, Pid: uint32(os.Getpid()), Status: p.status,
		Stdin: p.stdin, Stdout: p.stdout, Stderr: p.stderr, Terminal: p.terminal,
		ExitStatus: p.exitStatus, ExitedAt: p.exitedAt, ExecID: r.ExecID}, nil
}

// Delete removes an exec's record, or the whole container: its sandbox
// (stopped and kept when persistent) and runtime.
func (s *service) Delete(ctx context.Context, r *taskAPI.DeleteRequest) (*taskAPI.DeleteResponse, error) {
	p, err := s.get(r.ExecID)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if alive(p.status) {
		s.mu.Unlock()
		return nil, grpcErr(fmt.Errorf("process is running; kill it first: %w", errdefs.ErrFailedPrecondition))
	}
	lg := p.logger
	s.mu.Unlock()
	if lg != nil {
		// The logging program finishes with the output (its EOF comes
		// once the process's output is written), so the log is whole
		// when Delete answers; it is killed if it lingers (logio.go).
		lg.wait()
	}
	s.mu.Lock()
	if r.ExecID != "" {
		delete(s.procs, r.ExecID)
		delete(s.byCmd, p.cmdID)
		s.mu.Unlock()
		return &taskAPI.DeleteResponse{Pid: uint32(os.Getpid()), ExitStatus: p.exitStatus, ExitedAt: p.exitedAt}, nil
	}
	persistent, pod, member := s.persistent, s.pod, s.member
	s.mu.Unlock()
	if member {
		if err := s.deleteContainer(); err != nil {
			return nil, grpcErr(err)
		}
	}
	if pod || member {
		// The pod's sandbox goes with the last of its tasks.
		who := s.id
		if pod {
			who = podMemberSandbox
		}
		last, err := podLeave(s.name, who)
		if err != nil {
			return nil, grpcErr(err)
		}
		if last && persistent {
			if err := s.rpc.call("sandbox.stop", map[string]interface{}{"name": s.name}, nil); err != nil && !isReason(err, "not_found") {
				return nil, grpcErr(err)
			}
		} else if last {
			if err := s.cleanup(); err != nil {
				return nil, grpcErr(err)
			}
		}
	} else if persistent {
		// Kept for sandboxctl (its files and its runtime); stopped.
		if err := s.rpc.call("sandbox.stop", map[string]interface{}{"name": s.name}, nil); err != nil && !isReason(err, "not_found") {
			return nil, grpcErr(err)
		}
	} else if err := s.cleanup(); err != nil {
		return nil, grpcErr(err)
	}
	s.mu.Lock()
	s.deleted = true
	s.mu.Unlock()
	s.publish(runtime.TaskDeleteEventTopic, &eventstypes.TaskDelete{ContainerID: s.id, Pid: uint32(os.Getpid()),
		ExitStatus: p.exitStatus, ExitedAt: p.exitedAt})
	return &taskAPI.DeleteResponse{Pid: uint32(os.Getpid()), ExitStatus: p.exitStatus, ExitedAt: p.exitedAt}, nil
}

// Pause freezes the container's sandbox (sandbox.pause: its cgroup's
// freezer); a pod's container, its own cgroup only (container.pause).
func (s *service) Pause(ctx context.Context, r *taskAPI.PauseRequest) (*ptypes.Empty, error) {
	return s.pauseResume(true)
}

// Resume thaws it (sandbox.resume, container.resume).
func (s *service) Resume(ctx context.Context, r *taskAPI.ResumeRequest) (*ptypes.Empty, error) {
	return s.pauseResume(false)
}

func (s *service) pauseResume(pause bool) (*ptypes.Empty, error) {
	p, err := s.get("")
	if err != nil {
		return nil, err
	}
	if err := s.notForPod("pause and resume"); err != nil {
		return nil, err
	}
	s.mu.Lock()
	st := p.status
	member, ctr := s.member, s.ctr
	s.mu.Unlock()
	if st == task.StatusStopped || st == task.StatusCreated {
		return nil, grpcErr(fmt.Errorf("the container is not running: %w", errdefs.ErrFailedPrecondition))
	}
	method, topic := "sandbox.resume", runtime.TaskResumedEventTopic
	if pause {
		method, topic = "sandbox.pause", runtime.TaskPausedEventTopic
	}
	params := map[string]interface{}{"name": s.name}
	if member {
		// Its own cgroup's freezer: the pod and its other containers run on.
		method = "container." + strings.TrimPrefix(method, "sandbox.")
		params = map[string]interface{}{"sandbox": s.name, "name": ctr}
	}
	if err := s.rpc.call(method, params, nil); err != nil {
		return nil, grpcErr(err)
	}
	s.mu.Lock()
	if p.status == task.StatusRunning || p.status == task.StatusPaused {
		if pause {
			p.status = task.StatusPaused
		} else {
			p.status = task.StatusRunning
		}
	}
	s.mu.Unlock()
	if pause {
		s.publish(topic, &eventstypes.TaskPaused{ContainerID: s.id})
	} else {
		s.publish(topic, &eventstypes.TaskResumed{ContainerID: s.id})
	}
	return &ptypes.Empty{}, nil
}

func (s *service) Checkpoint(ctx context.Context, r *taskAPI.CheckpointTaskRequest) (*ptypes.Empty, error) {
	return nil, grpcErr(fmt.Errorf("checkpoint: not supported by sandboxd (use sandboxctl snapshot): %w", errdefs.ErrNotImplemented))
}

// Kill sends a signal to the process (all: to every running process).
func (s *service) Kill(ctx context.Context, r *taskAPI.KillRequest) (*ptypes.Empty, error) {
	p, err := s.get(r.ExecID)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	var targets []string
	if r.All {
		for _, q := range append([]*process{s.init}, mapValues(s.procs)...) {
			if alive(q.status) {
				targets = append(targets, q.cmdID)
			}
		}
	} else if alive(p.status) {
		targets = append(targets, p.cmdID)
	}
	created := p.status == task.StatusCreated && p.cmdID == ""
	podAlive := s.pod && alive(p.status)
	s.mu.Unlock()
	if created || podAlive {
		// Never started: it exits as if killed by the signal.
		s.exit(p, 128+r.Signal)
		return &ptypes.Empty{}, nil
	}
	if len(targets) == 0 {
		return nil, grpcErr(fmt.Errorf("process already finished: %w", errdefs.ErrNotFound))
	}
	for _, c := range targets {
		if err := s.rpc.call("command.kill", map[string]interface{}{"cmdId": c, "signal": r.Signal}, nil); err != nil && !isReason(err, "not_found") {
			return nil, grpcErr(err)
		}
	}
	s.mu.Lock()
	paused := s.init.status == task.StatusPaused
	s.mu.Unlock()
	if paused && r.Signal == uint32(syscall.SIGKILL) {
		// A frozen process keeps its SIGKILL pending: thawed, it dies at
		// once (as runc does for a paused container).
		if _, err := s.pauseResume(false); err != nil {
			return nil, err
		}
	}
	return &ptypes.Empty{}, nil
}

// alive says whether a process in state st has a command that runs
// (paused: frozen, still there).
func alive(st task.Status) bool { return st == task.StatusRunning || st == task.StatusPaused }

func mapValues(m map[string]*process) []*process {
	var l []*process
	for _, v := range m {
		l = append(l, v)
	}
	return l
}

// Exec adds a process to the container, started by Start.
func (s *service) Exec(ctx context.Context, r *taskAPI.ExecProcessRequest) (*ptypes.Empty, error) {
	if _, err := s.get(""); err != nil {
		return nil, err
	}
	if err := s.notForPod("exec"); err != nil {
		return nil, err
	}
	v, err := typeurl.UnmarshalAny(r.Spec)
	if err != nil {
		return nil, grpcErr(err)
	}
	spec, ok := v.(*specs.Process)
	if !ok {
		return nil, grpcErr(fmt.Errorf("exec spec is not a process: %w", errdefs.ErrInvalidArgument))
	}
	if lim, err := s.limits(); err != nil {
		return nil, grpcErr(err)
	} else if err := checkProcessLimits(spec, lim); err != nil {
		return nil, grpcErr(fmt.Errorf("%v: %w", err, errdefs.ErrInvalidArgument))
	}
	if _, err := commandParams(s.name, spec); err != nil {
		return nil, grpcErr(fmt.Errorf("%v: %w", err, errdefs.ErrInvalidArgument))
	}
	if err := checkOutputs(r.Stdout, r.Stderr, r.Terminal); err != nil {
		return nil, grpcErr(err)
	}
	s.mu.Lock()
	if s.init.status == task.StatusStopped {
		s.mu.Unlock()
		return nil, grpcErr(fmt.Errorf("the container's init process has exited: %w", errdefs.ErrFailedPrecondition))
	}
	if _, ok := s.procs[r.ExecID]; ok {
		s.mu.Unlock()
		return nil, grpcErr(fmt.Errorf("exec %s: %w", r.ExecID, errdefs.ErrAlreadyExists))
	}
	s.procs[r.ExecID] = &process{execID: r.ExecID, spec: spec, terminal: r.Terminal, stdin: r.Stdin,
		stdout: r.Stdout, stderr: r.Stderr, status: task.StatusCreated, exited: make(chan struct{}), wake: make(chan struct{}, 1), stdinWake: -1}
	s.mu.Unlock()
	s.publish(runtime.TaskExecAddedEventTopic, &eventstypes.TaskExecAdded{ContainerID: s.id, ExecID: r.ExecID})
	return &ptypes.Empty{}, nil
}

// ResizePty is command.resize.
func (s *service) ResizePty(ctx context.Context, r *taskAPI.ResizePtyRequest) (*ptypes.Empty, error) {
	p, err := s.get(r.ExecID)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	c := p.cmdID
	running := p.status == task.StatusRunning
	s.mu.Unlock()
	if !running {
		return &ptypes.Empty{}, nil
	}
	if err := s.rpc.call("command.resize", map[string]interface{}{"cmdId": c, "rows": r.Height, "cols": r.Width}, nil); err != nil {
		return nil, grpcErr(err)
	}
	return &ptypes.Empty{}, nil
}

// CloseIO closes the process's stdin (command.closeStdin once the FIFO's
// copy ends).
func (s *service) CloseIO(ctx context.Context, r *taskAPI.CloseIORequest) (*ptypes.Empty, error) {
	p, err := s.get(r.ExecID)
	if err != nil {
		return nil, err
	}
	if r.Stdin {
		s.mu.Lock()
		copying, cmd := p.stdinW != nil, p.cmdID
		if copying {
			// A client (ctr) asks for CloseIO as soon as its input
			// ends, with the last of it in the FIFO and its end still
			// open: the copy takes what the FIFO holds, then ends.
			atomic.StoreInt32(&p.stdinEnd, 1)
			wakeStdin(p)
		}
		s.mu.Unlock()
		if !copying && cmd != "" {
			s.rpc.call("command.closeStdin", map[string]interface{}{"cmdId": cmd}, nil)
		}
	}
	return &ptypes.Empty{}, nil
}

// Update applies linux.resources as the sandbox's vCPUs (sandbox.update).
func (s *service) Update(ctx context.Context, r *taskAPI.UpdateTaskRequest) (*ptypes.Empty, error) {
	if _, err := s.get(""); err != nil {
		return nil, err
	}
	if err := s.notForPod("update"); err != nil {
		return nil, err
	}
	if err := s.notForMember("update (the pod's sandbox holds the pod's resources)"); err != nil {
		return nil, err
	}
	v, err := typeurl.UnmarshalAny(r.Resources)
	if err != nil {
		return nil, grpcErr(err)
	}
	res, ok := v.(*specs.LinuxResources)
	if !ok {
		return nil, grpcErr(fmt.Errorf("resources are not linux resources: %w", errdefs.ErrInvalidArgument))
	}
	spec, err := readSpec(s.bundle)
	if err != nil {
		return nil, grpcErr(err)
	}
	if spec.Linux == nil {
		spec.Linux = &specs.Linux{}
	}
	spec.Linux.Resources = res
	lim, err := s.limits()
	if err != nil {
		return nil, grpcErr(err)
	}
	vcpus, err := vcpusFor(spec, lim)
	if err != nil {
		return nil, grpcErr(fmt.Errorf("%v: %w", err, errdefs.ErrInvalidArgument))
	}
	if vcpus == 0 {
		return &ptypes.Empty{}, nil
	}
	if err := s.rpc.call("sandbox.update", map[string]interface{}{"name": s.name,
		"resources": map[string]interface{}{"vcpus": vcpus}}, nil); err != nil {
		return nil, grpcErr(err)
	}
	return &ptypes.Empty{}, nil
}

// Wait answers when the process has exited.
func (s *service) Wait(ctx context.Context, r *taskAPI.WaitRequest) (*taskAPI.WaitResponse, error) {
	p, err := s.get(r.ExecID)
	if err != nil {
		return nil, err
	}
	select {
	case <-p.exited:
	case <-ctx.Done():
		return nil, grpcErr(ctx.Err())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return &taskAPI.WaitResponse{ExitStatus: p.exitStatus, ExitedAt: p.exitedAt}, nil
}

func (s *service) Connect(ctx context.Context, r *taskAPI.ConnectRequest) (*taskAPI.ConnectResponse, error) {
	return &taskAPI.ConnectResponse{ShimPid: uint32(os.Getpid()), TaskPid: uint32(os.Getpid())}, nil
}

// Shutdown ends the shim once its container is deleted (or never made).
func (s *service) Shutdown(ctx context.Context, r *taskAPI.ShutdownRequest) (*ptypes.Empty, error) {
	s.mu.Lock()
	busy := s.init != nil && !s.deleted
	s.mu.Unlock()
	if busy && !r.Now {
		return &ptypes.Empty{}, nil
	}
	s.sd.Shutdown()
	return &ptypes.Empty{}, nil
}
