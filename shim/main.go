// containerd-shim-sandboxd-v2: the containerd shim v2 for the runtime
// io.containerd.sandboxd.v2. containerd starts it for each task of that
// runtime; it carries the task out as a sandbox of sandboxd, driven over
// sandboxd's JSON-RPC socket (docs/API.md). See shim/README.md.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"syscall"
	"time"

	"github.com/containerd/containerd/events"
	"github.com/containerd/containerd/mount"
	"github.com/containerd/containerd/namespaces"
	"github.com/containerd/containerd/pkg/shutdown"
	"github.com/containerd/containerd/plugin"
	"github.com/containerd/containerd/runtime/v2/shim"
	"github.com/containerd/ttrpc"
)

type ttrpcServer = ttrpc.Server
type eventsEvent = events.Event

const runtimeName = "io.containerd.sandboxd.v2"

func init() {
	plugin.Register(&plugin.Registration{
		Type:     plugin.TTRPCPlugin,
		ID:       "task",
		Requires: []plugin.Type{plugin.EventPlugin, plugin.InternalPlugin},
		InitFn: func(ic *plugin.InitContext) (interface{}, error) {
			pp, err := ic.GetByID(plugin.EventPlugin, "publisher")
			if err != nil {
				return nil, err
			}
			ss, err := ic.GetByID(plugin.InternalPlugin, "shutdown")
			if err != nil {
				return nil, err
			}
			return newService(ic.Context, pp.(shim.Publisher), ss.(shutdown.Service))
		},
	})
}

func main() {
	shim.RunManager(context.Background(), manager{})
}

// manager starts the shim's server process ("start") and cleans up after a
// shim that died ("delete"), as containerd's runc shim manager does.
type manager struct{}

func (manager) Name() string { return runtimeName }

// Start re-executes this binary as the long-running shim serving a ttrpc
// socket of containerd's choosing, one shim per container, and answers the
// socket's address.
func (manager) Start(ctx context.Context, id string, opts shim.StartOpts) (_ string, retErr error) {
	ns, err := namespaces.NamespaceRequired(ctx)
	if err != nil {
		return "", err
	}
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	cwd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	args := []string{"-namespace", ns, "-id", id, "-address", opts.Address}
	if opts.Debug {
		args = append(args, "-debug")
	}
	cmd := exec.Command(self, args...)
	cmd.Dir = cwd
	cmd.Env = append(os.Environ(), "GOMAXPROCS=2")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}

	address, err := shim.SocketAddress(ctx, opts.Address, id)
	if err != nil {
		return "", err
	}
	socket, err := shim.NewSocket(address)
	if err != nil {
		if !shim.SocketEaddrinuse(err) {
			return "", fmt.Errorf("create new shim socket: %w", err)
		}
		if shim.CanConnect(address) {
			if err := shim.WriteAddress("address", address); err != nil {
				return "", err
			}
			return address, nil
		}
		if err := shim.RemoveSocket(address); err != nil {
			return "", fmt.Errorf("remove pre-existing socket: %w", err)
		}
		if socket, err = shim.NewSocket(address); err != nil {
			return "", fmt.Errorf("create new shim socket: %w", err)
		}
	}
	defer func() {
		if retErr != nil {
			socket.Close()
			_ = shim.RemoveSocket(address)
		}
	}()
	if err := shim.WriteAddress("address", address); err != nil {
		return "", err
	}
	f, err := socket.File()
	if err != nil {
		return "", err
	}
	cmd.ExtraFiles = append(cmd.ExtraFiles, f)
	goruntime.LockOSThread()
	err = cmd.Start()
	goruntime.UnlockOSThread()
	f.Close()
	if err != nil {
		return "", err
	}
	defer func() {
		if retErr != nil {
			cmd.Process.Kill()
		}
	}()
	go cmd.Wait()
	io.Copy(io.Discard, os.Stdin) // runtime options: none are read
	if err := shim.AdjustOOMScore(cmd.Process.Pid); err != nil {
		return "", fmt.Errorf("failed to adjust OOM score for shim: %w", err)
	}
	return address, nil
}

// Stop is "delete": the shim of container id is gone (containerd runs it
// after every shim's exit); remove its sandbox, runtime and rootfs mounts
// (the bundle is the working directory), or stop a persistent one.
func (manager) Stop(ctx context.Context, id string) (shim.StopStatus, error) {
	ns, _ := namespaces.Namespace(ctx)
	name := sandboxName(ns, id)
	cwd, cwdErr := os.Getwd()
	persistent := false
	role, member := "", id
	if cwdErr == nil {
		if spec, err := readSpec(cwd); err == nil {
			persistent = spec.Annotations[annPersistent] == "true"
			if rl, sbID, err := podRole(spec); err == nil && rl != "" {
				role, name = rl, podSandboxName(ns, sbID)
				if rl == containerTypeSandbox {
					member = podMemberSandbox
				}
			}
		}
	}
	if c, err := dialRPC(socketPath(), nil); err == nil {
		remove := true
		if role != "" {
			// A pod's task: its command (if any) is killed; the pod's
			// sandbox goes with the pod's last task (pod.go).
			if role == containerTypeContainer {
				if cmd := podRecordedCmd(name, member); cmd != "" {
					c.call("command.kill", map[string]interface{}{"cmdId": cmd, "signal": 9}, nil)
				}
				// Its own container and runtime.
				ctr := sandboxName(ns, id)
				c.call("container.delete", map[string]interface{}{"sandbox": name, "name": ctr}, nil)
				c.call("runtime.delete", map[string]interface{}{"name": ctr}, nil)
			}
			last, err := podLeave(name, member)
			remove = err == nil && last
		}
		if !remove {
		} else if persistent {
			// Kept, stopped, as the task's Delete keeps it.
			c.call("sandbox.stop", map[string]interface{}{"name": name}, nil)
		} else {
			c.call("sandbox.delete", map[string]interface{}{"name": name}, nil)
			c.call("runtime.delete", map[string]interface{}{"name": name}, nil)
		}
		c.close()
	}
	if cwdErr == nil {
		// The dead shim's socket (its address file in the bundle), as
		// containerd's runc shim removes it.
		if address, err := shim.ReadAddress(filepath.Join(cwd, "address")); err == nil {
			_ = shim.RemoveSocket(address)
		}
		mount.UnmountAll(filepath.Join(cwd, "rootfs"), 0)
		os.Remove(filepath.Join(cwd, rootfsTar))
	}
	return shim.StopStatus{Pid: 0, ExitStatus: 128 + 9, ExitedAt: time.Now()}, nil
}
