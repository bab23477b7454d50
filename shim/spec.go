package main

// How an OCI runtime spec (the bundle's config.json) maps onto sandboxd's
// sandbox.create and command.run parameters (docs/API.md). Whatever a
// sandbox cannot hold as asked is refused naming the spec field, never
// silently widened.

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Annotations read from the spec (io.sandboxd.*; any other key in that
// namespace is refused, so a typo never passes unnoticed).
const (
	annPolicy     = "io.sandboxd.network-policy"
	annTags       = "io.sandboxd.tags"
	annTimeout    = "io.sandboxd.timeout"
	annPersistent = "io.sandboxd.persistent"
	annResources  = "io.sandboxd.resources"
)

var knownAnnotations = []string{annPolicy, annTags, annTimeout, annPersistent, annResources}

// memPerVcpu is the memory a sandbox gets per vCPU (docs/API.md sandbox.update).
const memPerVcpu = int64(2048) << 20

// daemonLimits are the parts of daemon.info the mapping needs.
type daemonLimits struct {
	MaxTimeoutMs int64 `json:"maxTimeoutMs"`
	MaxVcpus     int64 `json:"maxVcpus"`
	PidsMax      int64 `json:"pidsMax"`
	// MaxSourceBytes bounds runtime.import's tree (0: not reported).
	MaxSourceBytes int64 `json:"maxSourceBytes"`
	// command.run's request limits (docs/API.md "Limits"; 0: not reported).
	MaxEnvVars       int `json:"maxEnvVars"`
	MaxEnvValueBytes int `json:"maxEnvValueBytes"`
	MaxEnvBytes      int `json:"maxEnvBytes"`
	MaxArgs          int `json:"maxArgs"`
	MaxArgsBytes     int `json:"maxArgsBytes"`
	MaxCmdBytes      int `json:"maxCmdBytes"`
	MaxCwdBytes      int `json:"maxCwdBytes"`
}

// sandboxName is the sandbox's (and its runtime's) name for container id in
// containerd namespace ns: "ctr-" and 16 hex digits of SHA-256(ns "/" id),
// as sandboxd's names are [a-z0-9-]{1,63} and container ids are not.
func sandboxName(ns, id string) string {
	h := sha256.Sum256([]byte(ns + "/" + id))
	return "ctr-" + hex.EncodeToString(h[:8])
}

// annotationParams maps the spec's io.sandboxd.* annotations to
// sandbox.create's params (networkPolicy, tags, timeout, persistent),
// refusing an unknown or invalid one naming it. Returns whether the
// sandbox is persistent.
func annotationParams(spec *specs.Spec, lim daemonLimits) (map[string]interface{}, bool, error) {
	p := map[string]interface{}{}
	persistent := false
	for k := range spec.Annotations {
		// Case-insensitively: IO.SANDBOXD.NETWORK-POLICY is refused, not ignored.
		if strings.HasPrefix(strings.ToLower(k), "io.sandboxd.") && !contains(knownAnnotations, k) {
			return nil, false, fmt.Errorf("annotation %s: unknown; the shim reads %s", k, strings.Join(knownAnnotations, ", "))
		}
	}
	if v, ok := spec.Annotations[annPolicy]; ok {
		// The same document as the API's networkPolicy: "allow-all",
		// "deny-all" or a policy object; sandboxd validates it.
		// The policy's JSON text goes to the daemon untouched (duplicate
		// keys and all), so sandboxd's strict parser judges it.
		var doc interface{}
		t := strings.TrimSpace(v)
		if t == "allow-all" || t == "deny-all" {
			doc = t
		} else if err := json.Unmarshal([]byte(t), &doc); err != nil {
			return nil, false, fmt.Errorf("annotation %s: not JSON (%v); give \"allow-all\", \"deny-all\" or a policy object (docs/POLICY.md)", annPolicy, err)
		} else if doc == nil {
			return nil, false, fmt.Errorf("annotation %s: null is not a policy; give \"allow-all\", \"deny-all\" or a policy object (docs/POLICY.md)", annPolicy)
		} else {
			doc = json.RawMessage(t)
		}
		p["networkPolicy"] = doc
	}
	if v, ok := spec.Annotations[annTags]; ok {
		var tags map[string]string
		if err := json.Unmarshal([]byte(v), &tags); err != nil || tags == nil {
			return nil, false, fmt.Errorf("annotation %s: not a JSON object of strings (%v)", annTags, err)
		}
		if k, dup := duplicateKey([]byte(v)); dup {
			return nil, false, fmt.Errorf("annotation %s: key %q appears more than once", annTags, k)
		}
		p["tags"] = tags
	}
	// A container runs until it exits: without an annotation its sandbox
	// gets the daemon's longest timeout, not the short default.
	timeout := lim.MaxTimeoutMs
	if v, ok := spec.Annotations[annTimeout]; ok {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || n <= 0 {
			return nil, false, fmt.Errorf("annotation %s: %q is not a whole number of milliseconds", annTimeout, v)
		}
		timeout = n
	}
	if timeout > 0 {
		p["timeout"] = timeout
	}
	if v, ok := spec.Annotations[annPersistent]; ok {
		switch v {
		case "true":
			persistent = true
		case "false":
		default:
			return nil, false, fmt.Errorf("annotation %s: %q is neither \"true\" nor \"false\"", annPersistent, v)
		}
		p["persistent"] = persistent
	}
	return p, persistent, nil
}

// createParams maps the spec to sandbox.create's params (name and runtime
// are added by the caller): the annotations (annotationParams), the
// restrictive fields checked (refuseRestrictions) and linux.resources as
// vCPUs. Returns whether the sandbox is persistent.
func createParams(spec *specs.Spec, lim daemonLimits) (map[string]interface{}, bool, error) {
	p, persistent, err := annotationParams(spec, lim)
	if err != nil {
		return nil, false, err
	}
	if err := refuseRestrictions(spec); err != nil {
		return nil, false, err
	}
	vcpus, err := vcpusFor(spec, lim)
	if err != nil {
		return nil, false, err
	}
	if vcpus > 0 {
		p["resources"] = map[string]interface{}{"vcpus": vcpus}
	}
	return p, persistent, nil
}

// duplicateKey reports the first key that appears twice in one object of
// the JSON text doc (at any depth). RFC 8259 §4 leaves duplicates'
// meaning open; encoding/json takes the last one, so they are refused.
func duplicateKey(doc []byte) (string, bool) {
	dec := json.NewDecoder(strings.NewReader(string(doc)))
	type frame struct {
		obj  bool
		keys map[string]bool
		key  bool // the next token of this object is a key
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return "", false
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.obj && top.key {
			if k, ok := tok.(string); ok {
				if top.keys[k] {
					return k, true
				}
				top.keys[k] = true
				top.key = false
				continue
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{obj: true, keys: map[string]bool{}, key: true})
			continue
		case json.Delim('['):
			stack = append(stack, &frame{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		// A value ended: the parent object's next token is a key.
		if len(stack) > 0 && stack[len(stack)-1].obj {
			stack[len(stack)-1].key = true
		}
	}
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// vcpusFor maps linux.resources to a vCPU count (0: none asked). A sandbox
// has vcpus CPUs of quota and vcpus x 2 GiB of memory, and the daemon's
// pidsMax; an OCI limit tighter than that would be widened, so it is
// refused naming the field unless the annotation io.sandboxd.resources is
// "round-up" (the operator accepts the next size up).
func vcpusFor(spec *specs.Spec, lim daemonLimits) (int64, error) {
	if spec.Linux == nil || spec.Linux.Resources == nil {
		return 0, nil
	}
	r := spec.Linux.Resources
	roundUp := false
	if v, ok := spec.Annotations[annResources]; ok {
		if v != "round-up" && v != "exact" {
			return 0, fmt.Errorf("annotation %s: %q is neither \"exact\" nor \"round-up\"", annResources, v)
		}
		roundUp = v == "round-up"
	}
	hint := fmt.Sprintf("; a sandbox has whole vCPUs with 2 GiB of memory each (annotation %s: round-up accepts the next size up)", annResources)
	var vcpus int64
	var memVcpus, cpuVcpus int64
	if r.Memory != nil && r.Memory.Limit != nil && *r.Memory.Limit > 0 {
		m := *r.Memory.Limit
		memVcpus = (m + memPerVcpu - 1) / memPerVcpu
		vcpus = memVcpus
	}
	if r.CPU != nil {
		if r.CPU.Quota != nil && *r.CPU.Quota > 0 {
			period := int64(100000)
			if r.CPU.Period != nil && *r.CPU.Period > 0 {
				period = int64(*r.CPU.Period)
			}
			q := *r.CPU.Quota
			cpuVcpus = (q + period - 1) / period
			if cpuVcpus > vcpus {
				vcpus = cpuVcpus
			}
		}
		if r.CPU.Cpus != "" && !roundUp {
			return 0, fmt.Errorf("linux.resources.cpu.cpus: a sandbox cannot be pinned to CPUs (%q)%s", r.CPU.Cpus, hint)
		}
	}
	if !roundUp {
		if memVcpus > 0 && *r.Memory.Limit != vcpus*memPerVcpu {
			return 0, fmt.Errorf("linux.resources.memory.limit: %d bytes is not what a sandbox of %d vCPU(s) gets (%d bytes)%s",
				*r.Memory.Limit, vcpus, vcpus*memPerVcpu, hint)
		}
		if cpuVcpus > 0 {
			period := int64(100000)
			if r.CPU.Period != nil && *r.CPU.Period > 0 {
				period = int64(*r.CPU.Period)
			}
			if *r.CPU.Quota != vcpus*period {
				return 0, fmt.Errorf("linux.resources.cpu.quota: %d us per %d us is not the %d whole vCPU(s) a sandbox gets%s",
					*r.CPU.Quota, period, vcpus, hint)
			}
		}
		if r.Pids != nil && r.Pids.Limit > 0 && lim.PidsMax > 0 && r.Pids.Limit < lim.PidsMax {
			return 0, fmt.Errorf("linux.resources.pids.limit: %d is below the sandbox's pids.max of %d (daemon.json pidsMax)%s",
				r.Pids.Limit, lim.PidsMax, hint)
		}
	}
	if lim.MaxVcpus > 0 && vcpus > lim.MaxVcpus {
		return 0, fmt.Errorf("linux.resources: %d vCPU(s) are needed, over the daemon's maxVcpus of %d", vcpus, lim.MaxVcpus)
	}
	return vcpus, nil
}

// commandParams maps an OCI process to command.run's params for sandbox
// name: args[0] the command, env, cwd, uid 0 as sudo (any other uid runs
// as the sandbox user), terminal as tty with the console size.
func commandParams(name string, proc *specs.Process) (map[string]interface{}, error) {
	if proc == nil || len(proc.Args) == 0 {
		return nil, fmt.Errorf("process.args: empty; the process needs a command")
	}
	if err := refuseProcessRestrictions(proc); err != nil {
		return nil, err
	}
	p := map[string]interface{}{"sandbox": name, "cmd": proc.Args[0], "detached": true}
	if len(proc.Args) > 1 {
		p["args"] = proc.Args[1:]
	}
	if len(proc.Env) > 0 {
		env := map[string]string{}
		for i, kv := range proc.Env {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return nil, fmt.Errorf("process.env[%d]: %q is not NAME=VALUE", i, kv)
			}
			env[k] = v
		}
		p["env"] = env
	}
	if proc.Cwd != "" {
		p["cwd"] = proc.Cwd
	}
	if proc.User.UID == 0 {
		p["sudo"] = true
	}
	if proc.Terminal {
		p["tty"] = true
		if proc.ConsoleSize != nil && proc.ConsoleSize.Height > 0 && proc.ConsoleSize.Width > 0 {
			p["rows"] = proc.ConsoleSize.Height
			p["cols"] = proc.ConsoleSize.Width
		}
	}
	return p, nil
}

// checkProcessLimits refuses, naming the field, a process command.run
// would refuse at Start (docs/API.md "Limits" and command.run): a NUL byte
// in args, env or cwd, a relative cwd, and args, env or cwd over the
// daemon's limits lim. Checked at Create and Exec, so a task that cannot
// start is never created.
func checkProcessLimits(proc *specs.Process, lim daemonLimits) error {
	over := func(n, max int) bool { return max > 0 && n > max }
	if proc == nil || len(proc.Args) == 0 {
		return fmt.Errorf("process.args: empty; the process needs a command")
	}
	total := 0
	for i, a := range proc.Args {
		if strings.IndexByte(a, 0) >= 0 {
			return fmt.Errorf("process.args[%d]: contains a NUL byte", i)
		}
		if i > 0 {
			total += len(a)
		}
	}
	if over(len(proc.Args[0]), lim.MaxCmdBytes) {
		return fmt.Errorf("process.args[0]: %d bytes, over the daemon's maxCmdBytes of %d", len(proc.Args[0]), lim.MaxCmdBytes)
	}
	if over(len(proc.Args)-1, lim.MaxArgs) || over(total, lim.MaxArgsBytes) {
		return fmt.Errorf("process.args: %d arguments of %d bytes, over the daemon's maxArgs of %d or maxArgsBytes of %d",
			len(proc.Args)-1, total, lim.MaxArgs, lim.MaxArgsBytes)
	}
	total = 0
	for i, kv := range proc.Env {
		if strings.IndexByte(kv, 0) >= 0 {
			return fmt.Errorf("process.env[%d]: contains a NUL byte", i)
		}
		_, v, _ := strings.Cut(kv, "=")
		if over(len(v), lim.MaxEnvValueBytes) {
			return fmt.Errorf("process.env[%d]: a value of %d bytes, over the daemon's maxEnvValueBytes of %d", i, len(v), lim.MaxEnvValueBytes)
		}
		total += len(kv)
	}
	if over(len(proc.Env), lim.MaxEnvVars) || over(total, lim.MaxEnvBytes) {
		return fmt.Errorf("process.env: %d variables of %d bytes, over the daemon's maxEnvVars of %d or maxEnvBytes of %d",
			len(proc.Env), total, lim.MaxEnvVars, lim.MaxEnvBytes)
	}
	if proc.Cwd != "" {
		if strings.IndexByte(proc.Cwd, 0) >= 0 {
			return fmt.Errorf("process.cwd: contains a NUL byte")
		}
		if !strings.HasPrefix(proc.Cwd, "/") {
			return fmt.Errorf("process.cwd: %q is not an absolute path", proc.Cwd)
		}
		if over(len(proc.Cwd), lim.MaxCwdBytes) {
			return fmt.Errorf("process.cwd: %d bytes, over the daemon's maxCwdBytes of %d", len(proc.Cwd), lim.MaxCwdBytes)
		}
	}
	return nil
}

// The restrictive values of containerd's default spec (oci.WithDefaultSpec,
// containerd 1.6 oci/spec.go populateDefaultUnixSpec, which ctr and the
// CRI plugin start from): accepted, as the sandbox's own confinement
// (docs/SECURITY.md) covers them. Anything more restrictive is refused.
var (
	defaultMaskedPaths = []string{"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
		"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware", "/proc/scsi"}
	defaultReadonlyPaths = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}
	defaultCaps          = []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD",
		"CAP_NET_RAW", "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE",
		"CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE"}
)

const notSupported = "not supported by " + runtimeName

// refuseRestrictions fails closed on the spec's restrictive fields the
// shim cannot apply (the container would get more than asked), naming the
// field: root.readonly, linux.resources unified/blockIO/hugepageLimits,
// device cgroup rules other than the default leading deny-all (allow rules
// only widen, and the sandbox has its own devices), sysctl, seccomp, and
// masked or read-only paths beyond containerd's defaults.
func refuseRestrictions(spec *specs.Spec) error {
	if spec.Root != nil && spec.Root.Readonly {
		return fmt.Errorf("root.readonly: a read-only root is %s (the sandbox's root is writable)", notSupported)
	}
	l := spec.Linux
	if l == nil {
		return nil
	}
	if r := l.Resources; r != nil {
		if len(r.Unified) > 0 {
			return fmt.Errorf("linux.resources.unified: %s", notSupported)
		}
		if r.BlockIO != nil {
			return fmt.Errorf("linux.resources.blockIO: %s", notSupported)
		}
		if len(r.HugepageLimits) > 0 {
			return fmt.Errorf("linux.resources.hugepageLimits: %s", notSupported)
		}
		for i, d := range r.Devices {
			if d.Allow {
				continue
			}
			if i == 0 && (d.Type == "" || d.Type == "a") && d.Major == nil && d.Minor == nil && d.Access == "rwm" {
				continue // the default deny-all
			}
			return fmt.Errorf("linux.resources.devices[%d]: a deny rule other than the leading deny-all is %s", i, notSupported)
		}
		if r.Network != nil {
			return fmt.Errorf("linux.resources.network: %s", notSupported)
		}
		if r.Rdma != nil && len(r.Rdma) > 0 {
			return fmt.Errorf("linux.resources.rdma: %s", notSupported)
		}
	}
	if len(l.Sysctl) > 0 {
		return fmt.Errorf("linux.sysctl: %s (%s)", notSupported, strings.Join(sortedKeys(l.Sysctl), ", "))
	}
	if l.Seccomp != nil {
		return fmt.Errorf("linux.seccomp: a seccomp profile of the spec is %s (the sandbox has sandboxd's own filter)", notSupported)
	}
	for i, m := range l.MaskedPaths {
		if !contains(defaultMaskedPaths, m) {
			return fmt.Errorf("linux.maskedPaths[%d]: %q beyond containerd's defaults is %s", i, m, notSupported)
		}
	}
	for i, m := range l.ReadonlyPaths {
		if !contains(defaultReadonlyPaths, m) {
			return fmt.Errorf("linux.readonlyPaths[%d]: %q beyond containerd's defaults is %s", i, m, notSupported)
		}
	}
	return nil
}

// refuseProcessRestrictions is refuseRestrictions for a process (the
// container's or an exec's): rlimits other than containerd's default
// RLIMIT_NOFILE 1024/1024, capability sets narrower than containerd's
// default, and an AppArmor profile or SELinux label.
func refuseProcessRestrictions(proc *specs.Process) error {
	for i, rl := range proc.Rlimits {
		if rl.Type != "RLIMIT_NOFILE" || rl.Hard != 1024 || rl.Soft != 1024 || len(proc.Rlimits) != 1 {
			return fmt.Errorf("process.rlimits[%d]: %s %d/%d: rlimits other than the default RLIMIT_NOFILE 1024/1024 are %s",
				i, rl.Type, rl.Soft, rl.Hard, notSupported)
		}
	}
	if c := proc.Capabilities; c != nil {
		for _, set := range []struct {
			name string
			caps []string
		}{{"bounding", c.Bounding}, {"effective", c.Effective}, {"permitted", c.Permitted}} {
			for _, want := range defaultCaps {
				if !contains(set.caps, want) {
					return fmt.Errorf("process.capabilities.%s: without %s it is narrower than containerd's default, which is %s",
						set.name, want, notSupported)
				}
			}
		}
	} else {
		return fmt.Errorf("process.capabilities: none (narrower than containerd's default) is %s", notSupported)
	}
	if proc.ApparmorProfile != "" {
		return fmt.Errorf("process.apparmorProfile: %s", notSupported)
	}
	if proc.SelinuxLabel != "" {
		return fmt.Errorf("process.selinuxLabel: %s", notSupported)
	}
	return nil
}

// policyError rewrites a sandboxd error about networkPolicy to name the
// annotation it came from.
func policyError(err error) error {
	if re, ok := err.(*rpcError); ok && strings.HasPrefix(re.Data.Field, "networkPolicy") {
		return fmt.Errorf("annotation %s: %s", annPolicy, re.Error())
	}
	return err
}

func sortedKeys(m map[string]string) []string {
	k := make([]string, 0, len(m))
	for x := range m {
		k = append(k, x)
	}
	sort.Strings(k)
	return k
}

// The mounts containerd's default spec (oci.WithDefaultSpec) and the CRI
// plugin always set, by destination and type: the sandbox has its own of
// each (its /proc, /sys, /dev, /run), so they are accepted, not applied.
var defaultMounts = map[string][]string{
	"/proc":          {"proc"},
	"/sys":           {"sysfs"},
	"/sys/fs/cgroup": {"cgroup", "cgroup2"},
	"/dev":           {"tmpfs"},
	"/dev/pts":       {"devpts"},
	"/dev/shm":       {"tmpfs", "bind"},
	"/dev/mqueue":    {"mqueue"},
	"/run":           {"tmpfs"},
}

// The files the CRI plugin (or the kubelet) bind-mounts for the pod's
// name and DNS: the sandbox has its own /etc/hosts, /etc/hostname (its
// name) and /etc/resolv.conf (its DNS filter, which enforces the policy),
// so these are accepted, not applied.
var ownFiles = []string{"/etc/hosts", "/etc/hostname", "/etc/resolv.conf"}

// isBind says whether an OCI mount is a bind mount (type "bind", or an
// option "bind"/"rbind", as runc reads it).
func isBind(m specs.Mount) bool {
	if m.Type == "bind" {
		return true
	}
	for _, o := range m.Options {
		if o == "bind" || o == "rbind" {
			return true
		}
	}
	return false
}

// hostMount is a bind mount the sandbox is asked to apply: a host
// directory or file source at destination, read-only when asked.
type hostMount struct {
	Source      string `json:"source"`
	Destination string `json:"destination"`
	ReadOnly    bool   `json:"readOnly,omitempty"`
}

// specMounts sorts the spec's mounts: those of containerd's default spec
// and the CRI's name/DNS files are the sandbox's own (accepted, not
// applied); other bind mounts are returned for the daemon to apply
// (source and destination absolute; "ro" in the options makes it
// read-only); anything else (another filesystem type, or a default
// destination with another type) is refused naming mounts[i].
func specMounts(spec *specs.Spec) ([]hostMount, error) {
	var out []hostMount
	for i, m := range spec.Mounts {
		bind := isBind(m)
		if types, ok := defaultMounts[m.Destination]; ok {
			t := m.Type
			if bind {
				t = "bind"
			}
			if contains(types, t) {
				continue
			}
		}
		if bind && contains(ownFiles, m.Destination) {
			continue
		}
		if !bind {
			return nil, fmt.Errorf("mounts[%d]: a %q mount at %s is %s (only bind mounts of host paths, and containerd's default mounts, which the sandbox has of its own)",
				i, m.Type, m.Destination, notSupported)
		}
		if !strings.HasPrefix(m.Source, "/") || !strings.HasPrefix(m.Destination, "/") {
			return nil, fmt.Errorf("mounts[%d]: a bind mount of %q at %q needs absolute paths", i, m.Source, m.Destination)
		}
		hm := hostMount{Source: m.Source, Destination: m.Destination}
		for _, o := range m.Options {
			switch o {
			case "ro":
				hm.ReadOnly = true
			case "rw", "bind", "rbind", "nosuid", "nodev", "noexec", "private", "rprivate", "slave", "rslave":
				// rw is the default; the daemon's bind mounts are
				// always nosuid,nodev and private.
			default:
				return nil, fmt.Errorf("mounts[%d]: option %q of the bind mount at %s is %s", i, o, m.Destination, notSupported)
			}
		}
		out = append(out, hm)
	}
	return out, nil
}

// mountsUnsupported refuses the first of mounts, naming it: used while the
// daemon has no way to apply a host bind mount for this container.
func mountsUnsupported(spec *specs.Spec, mounts []hostMount) error {
	if len(mounts) == 0 {
		return nil
	}
	for i, m := range spec.Mounts {
		if m.Destination == mounts[0].Destination && m.Source == mounts[0].Source {
			return fmt.Errorf("mounts[%d]: the bind mount of %s at %s is %s yet", i, m.Source, m.Destination, notSupported)
		}
	}
	return fmt.Errorf("mounts: bind mounts are %s yet", notSupported)
}

// specNetns reads linux.namespaces: every type given without a path is
// the sandbox's own (accepted); a network namespace with a path is
// returned (the sandbox joins it: sandbox.create network.netns); a path
// for another type is accepted only for a pod's container (podMember: the
// pod's namespaces, which its pod's sandbox has), else refused naming
// linux.namespaces[i]; a user namespace in the spec, uid/gid mappings and
// no network namespace at all (the host's network) are refused.
func specNetns(spec *specs.Spec, podMember bool) (string, error) {
	l := spec.Linux
	if l == nil {
		return "", fmt.Errorf("linux: a spec without linux.namespaces asks for the host's namespaces, which is %s", notSupported)
	}
	if len(l.UIDMappings) > 0 || len(l.GIDMappings) > 0 {
		return "", fmt.Errorf("linux.uidMappings: the spec's user namespace mappings are %s (the sandbox has sandboxd's own user namespace, docs/SECURITY.md)", notSupported)
	}
	netns, haveNet := "", false
	for i, ns := range l.Namespaces {
		switch ns.Type {
		case specs.UserNamespace:
			return "", fmt.Errorf("linux.namespaces[%d]: a user namespace of the spec is %s (the sandbox has sandboxd's own, docs/SECURITY.md)", i, notSupported)
		case specs.NetworkNamespace:
			haveNet = true
			if ns.Path != "" && !podMember {
				netns = ns.Path
			}
		default:
			if ns.Path != "" && !podMember {
				return "", fmt.Errorf("linux.namespaces[%d]: joining the %s namespace %s is %s (only a network namespace path is joined)",
					i, ns.Type, ns.Path, notSupported)
			}
		}
	}
	if !haveNet {
		return "", fmt.Errorf("linux.namespaces: no network namespace (the host's network) is %s", notSupported)
	}
	return netns, nil
}

// specPidNamespace reads the pid entry of linux.namespaces for a pod's
// container (the CRI's NamespaceOption.pid): without a path a PID
// namespace of its own (CONTAINER, Kubernetes' default), container.create
// pidNamespace "container"; with a path (containerd names the pod's
// sandbox container's, POD: shareProcessNamespace) the pod sandbox's,
// "sandbox". No pid entry asks for the host's PIDs (hostPID), refused
// naming linux.namespaces.
func specPidNamespace(spec *specs.Spec) (string, error) {
	if spec.Linux != nil {
		for _, ns := range spec.Linux.Namespaces {
			if ns.Type == specs.PIDNamespace {
				if ns.Path != "" {
					return "sandbox", nil
				}
				return "container", nil
			}
		}
	}
	return "", fmt.Errorf("linux.namespaces: no pid namespace (the host's processes, hostPID) is %s", notSupported)
}

// containerLimits maps a pod's container's linux.resources to
// container.create's memoryMiB (memory.limit in whole MiB), cpuMillis
// (cpu.quota per cpu.period in thousandths of a CPU) and pidsMax
// (pids.limit): a limit that is not a whole number of those units is
// refused naming the field (it would be widened) unless roundUp (the pod's
// io.sandboxd.resources: round-up; then rounded up); cpu.cpus is refused.
// cpu.shares (a relative weight) is not applied.
func containerLimits(spec *specs.Spec, roundUp bool) (map[string]interface{}, error) {
	out := map[string]interface{}{}
	if spec.Linux == nil || spec.Linux.Resources == nil {
		return out, nil
	}
	r := spec.Linux.Resources
	hint := fmt.Sprintf(" (annotation %s: round-up accepts the next unit up)", annResources)
	if r.Memory != nil && r.Memory.Limit != nil && *r.Memory.Limit > 0 {
		m := *r.Memory.Limit
		if m%(1<<20) != 0 && !roundUp {
			return nil, fmt.Errorf("linux.resources.memory.limit: %d bytes is not a whole number of MiB%s", m, hint)
		}
		out["memoryMiB"] = (m + (1 << 20) - 1) >> 20
	}
	if r.CPU != nil {
		if r.CPU.Cpus != "" {
			return nil, fmt.Errorf("linux.resources.cpu.cpus: pinning a container to CPUs (%q) is %s", r.CPU.Cpus, notSupported)
		}
		if r.CPU.Quota != nil && *r.CPU.Quota > 0 {
			period := int64(100000)
			if r.CPU.Period != nil && *r.CPU.Period > 0 {
				period = int64(*r.CPU.Period)
			}
			q := *r.CPU.Quota * 1000
			if q%period != 0 && !roundUp {
				return nil, fmt.Errorf("linux.resources.cpu.quota: %d us per %d us is not a whole number of thousandths of a CPU%s",
					*r.CPU.Quota, period, hint)
			}
			out["cpuMillis"] = (q + period - 1) / period
		}
	}
	if r.Pids != nil && r.Pids.Limit > 0 {
		out["pidsMax"] = r.Pids.Limit
	}
	return out, nil
}
