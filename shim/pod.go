package main

import (
	"fmt"

	"github.com/containerd/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
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

// podSandbox says whether the spec is a CRI pod's sandbox container. An
// unknown container-type is refused (naming the annotation), so a pod's
// container is never taken for something else.
//
// Such a task holds the pod: it makes no sandboxd sandbox and runs nothing
// (no process of the pause image runs, so its spec's restrictions, such as
// the CRI's read-only root, restrict nothing that runs). It is RUNNING from
// Start until Kill, which ends it at once with 128+signal; Delete removes
// only the record. The pod's containers are sandboxes of their own
// (docs/KUBERNETES.md "The pod model" for the one-sandbox-per-pod design
// that replaces this).
func podSandbox(spec *specs.Spec) (bool, error) {
	t, ok := spec.Annotations[annContainerType]
	if !ok {
		return false, nil
	}
	switch t {
	case containerTypeSandbox:
		if spec.Annotations[annSandboxID] == "" {
			return false, fmt.Errorf("annotation %s: a sandbox container needs %s: %w", annContainerType, annSandboxID, errdefs.ErrInvalidArgument)
		}
		return true, nil
	case containerTypeContainer:
		return false, nil
	}
	return false, fmt.Errorf("annotation %s: %q is neither %q nor %q: %w", annContainerType, t,
		containerTypeSandbox, containerTypeContainer, errdefs.ErrInvalidArgument)
}
