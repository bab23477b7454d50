package main

// A CRI pod is one sandboxd sandbox (docs/KUBERNETES.md "The pod model"):
// the pod's sandbox container ("pause", container-type sandbox) creates it,
// named from the containerd namespace and the pod's sandbox id, configured
// by the pod's io.sandboxd.* annotations; the pod's other containers
// (container-type container, the same sandbox id) are containers of it
// (container.create), their processes commands in them. The
// sandbox is removed when the sandbox container and the last of its
// containers are deleted: each shim records its task in the pod's
// directory below podStateDir (under an flock), and the one that leaves
// it empty deletes the sandbox and its runtime.

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/containerd/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// The CRI marks the containers of a pod in their spec's annotations
// (containerd pkg/cri/annotations): the pod's sandbox container ("pause")
// has container-type "sandbox", the pod's other containers "container",
// both with the pod's id in sandbox-id.
const (
	annContainerType       = "io.kubernetes.cri.container-type"
	annSandboxID           = "io.kubernetes.cri.sandbox-id"
	containerTypeSandbox   = "sandbox"
	containerTypeContainer = "container"
)

// podMemberSandbox is the sandbox container's record in its pod's
// directory (a container id never starts with ".").
const podMemberSandbox = ".sandbox-container"

// podStateDir holds, per pod sandbox, one file per task of the pod (the
// sandbox container's "sandbox", each container's by its id). tmpfs:
// a reboot ends every pod anyway.
var podStateDir = "/run/containerd-shim-sandboxd-v2/pods"

// podRole reads the CRI's container-type annotation: "" (not part of a
// CRI pod: a sandbox of its own), containerTypeSandbox or
// containerTypeContainer, with the pod's sandbox id. An unknown type, or
// a pod's task without its sandbox id, is refused naming the annotation.
func podRole(spec *specs.Spec) (role, sandboxID string, err error) {
	t, ok := spec.Annotations[annContainerType]
	if !ok {
		return "", "", nil
	}
	if t != containerTypeSandbox && t != containerTypeContainer {
		return "", "", fmt.Errorf("annotation %s: %q is neither %q nor %q: %w", annContainerType, t,
			containerTypeSandbox, containerTypeContainer, errdefs.ErrInvalidArgument)
	}
	id := spec.Annotations[annSandboxID]
	if id == "" {
		return "", "", fmt.Errorf("annotation %s: a pod's %s container needs %s: %w", annContainerType, t, annSandboxID, errdefs.ErrInvalidArgument)
	}
	return t, id, nil
}

// podSandboxName is the sandbox (and runtime) name of the pod with sandbox
// id sandboxID in containerd namespace ns: "pod-" and 16 hex digits of
// SHA-256(ns "/" sandboxID).
func podSandboxName(ns, sandboxID string) string {
	h := sha256.Sum256([]byte(ns + "/" + sandboxID))
	return "pod-" + hex.EncodeToString(h[:8])
}

// podSpec reads the spec of the pod's sandbox container, whose bundle is
// the sibling named sandboxID of bundle (containerd keeps a namespace's
// bundles in one directory). Errors name the sandbox-id annotation.
func podSpec(bundle, sandboxID string) (*specs.Spec, error) {
	if strings.ContainsAny(sandboxID, "/") || sandboxID == "." || sandboxID == ".." {
		return nil, fmt.Errorf("annotation %s: %q is not a container id: %w", annSandboxID, sandboxID, errdefs.ErrInvalidArgument)
	}
	spec, err := readSpec(filepath.Join(filepath.Dir(bundle), sandboxID))
	if err != nil {
		return nil, fmt.Errorf("annotation %s: the pod's sandbox container %s is not a task of %s here (%v): %w",
			annSandboxID, sandboxID, runtimeName, err, errdefs.ErrFailedPrecondition)
	}
	if spec.Annotations[annContainerType] != containerTypeSandbox {
		return nil, fmt.Errorf("annotation %s: %s is not a pod's sandbox container (%s %q): %w",
			annSandboxID, sandboxID, annContainerType, spec.Annotations[annContainerType], errdefs.ErrInvalidArgument)
	}
	return spec, nil
}

// checkPodAnnotations refuses a container's io.sandboxd.* annotation
// (any case) that the pod's sandbox container does not have with the same
// value: the pod is one sandbox with one policy, so a container cannot
// have its own. The error names the annotation.
func checkPodAnnotations(spec, pod *specs.Spec) error {
	for _, k := range sortedKeys(spec.Annotations) {
		if !strings.HasPrefix(strings.ToLower(k), "io.sandboxd.") {
			continue
		}
		pv, ok := pod.Annotations[k]
		if !ok || pv != spec.Annotations[k] {
			return fmt.Errorf("annotation %s: differs from its pod's (a pod is one sandbox: set it on the pod, for all its containers): %w",
				k, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// podJoin records task `member` ("sandbox" for the sandbox container,
// else the container's id) in pod sandbox name's directory.
func podJoin(name, member string) error {
	return podLocked(name, func(dir string) error {
		f, err := os.OpenFile(filepath.Join(dir, member), os.O_CREATE|os.O_WRONLY|unix.O_NOFOLLOW|os.O_TRUNC, 0600)
		if err != nil {
			return err
		}
		return f.Close()
	})
}

// podLeave removes task member's record from pod sandbox name's
// directory and says whether it was the last: the caller then deletes the
// sandbox (the directory is removed under the lock first, so a task that
// joins later makes it anew and finds the sandbox gone).
func podLeave(name, member string) (last bool, err error) {
	err = podLocked(name, func(dir string) error {
		if err := os.Remove(filepath.Join(dir, member)); err != nil && !os.IsNotExist(err) {
			return err
		}
		ents, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		for _, e := range ents {
			if e.Name() != ".lock" && e.Name() != "." {
				return nil
			}
		}
		last = true
		os.Remove(filepath.Join(dir, ".lock"))
		return os.Remove(dir)
	})
	return last, err
}

// podLocked runs fn with pod sandbox name's directory (made 0700 if
// missing) held under flock(2) of its .lock file.
func podLocked(name string, fn func(dir string) error) error {
	for {
		dir := filepath.Join(podStateDir, name)
		if err := os.MkdirAll(dir, 0700); err != nil {
			return fmt.Errorf("pod state %s: %w", dir, err)
		}
		fd, err := unix.Open(filepath.Join(dir, ".lock"), unix.O_CREAT|unix.O_RDWR|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0600)
		if err != nil {
			return fmt.Errorf("pod state %s: %w", dir, err)
		}
		if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
			unix.Close(fd)
			return fmt.Errorf("pod state %s: %w", dir, err)
		}
		// A podLeave that removed the directory meanwhile: the lock held
		// is of a removed file; start over.
		var a, b unix.Stat_t
		if unix.Fstat(fd, &a) != nil || unix.Stat(filepath.Join(dir, ".lock"), &b) != nil || a.Ino != b.Ino {
			unix.Close(fd)
			continue
		}
		err = fn(dir)
		unix.Close(fd)
		return err
	}
}

// podRecordCmd writes cmdID into task member's record, so that a dead
// shim's clean-up (manager.Stop) can kill the command it left running.
func podRecordCmd(name, member, cmdID string) error {
	return podLocked(name, func(dir string) error {
		return os.WriteFile(filepath.Join(dir, member), []byte(cmdID), 0600)
	})
}

// podRecordedCmd reads task member's recorded command id ("" if none).
func podRecordedCmd(name, member string) string {
	var id string
	podLocked(name, func(dir string) error {
		b, err := os.ReadFile(filepath.Join(dir, member))
		if err == nil {
			id = string(b)
		}
		return nil
	})
	return id
}
