package main

// Pids and Stats from the session's cgroup, whose directories sandboxd
// shows as session.cgroups of the Sandbox (docs/API.md "Objects"). The
// shim only reads them: limits, freezing and killing stay the daemon's.

import (
	"bufio"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	v1 "github.com/containerd/cgroups/stats/v1"
	v2 "github.com/containerd/cgroups/v2/stats"
	"github.com/containerd/containerd/api/types/task"
	"github.com/containerd/containerd/errdefs"
	taskAPI "github.com/containerd/containerd/runtime/v2/task"
	"github.com/containerd/typeurl"
)

// sessionCgroups answers the running session's cgroup directories.
func (s *service) sessionCgroups() ([]string, error) {
	if err := s.notForPod("pids and stats"); err != nil {
		return nil, err
	}
	var sb struct {
		Session *struct {
			Cgroups []string `json:"cgroups"`
		} `json:"session"`
	}
	if err := s.rpc.call("sandbox.get", map[string]interface{}{"name": s.name}, &sb); err != nil {
		return nil, err
	}
	if sb.Session == nil || len(sb.Session.Cgroups) == 0 {
		return nil, fmt.Errorf("sandbox %s has no running session: %w", s.name, errdefs.ErrFailedPrecondition)
	}
	return sb.Session.Cgroups, nil
}

func readUint(dir, file string) (uint64, bool) {
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return 0, false
	}
	t := strings.TrimSpace(string(b))
	if t == "max" {
		return 0, true
	}
	n, err := strconv.ParseUint(t, 10, 64)
	return n, err == nil
}

// readKV reads a "key value" per line file (cpu.stat, memory.stat).
func readKV(dir, file string) map[string]uint64 {
	f, err := os.Open(filepath.Join(dir, file))
	if err != nil {
		return nil
	}
	defer f.Close()
	m := map[string]uint64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) == 2 {
			if n, err := strconv.ParseUint(fs[1], 10, 64); err == nil {
				m[fs[0]] = n
			}
		}
	}
	return m
}

// Pids lists the host pids in the session's cgroup and the cgroups below
// it (sandbox-init, sandbox-netd and every process of the container's
// commands); for a CRI pod's container, those of its own cgroup
// (ctr-NAME: its commands and, with a PID namespace of its own, that
// namespace's PID 1). The init command's entry carries no exec id.
func (s *service) Pids(ctx context.Context, r *taskAPI.PidsRequest) (*taskAPI.PidsResponse, error) {
	if _, err := s.get(""); err != nil {
		return nil, err
	}
	dirs, err := s.sessionCgroups()
	if err != nil {
		return nil, grpcErr(err)
	}
	top := dirs[0]
	s.mu.Lock()
	if s.member {
		top = filepath.Join(top, "ctr-"+s.ctr)
	}
	s.mu.Unlock()
	var out []*task.ProcessInfo
	err = filepath.WalkDir(top, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		b, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
		if err != nil {
			return err
		}
		for _, l := range strings.Fields(string(b)) {
			if pid, err := strconv.ParseUint(l, 10, 32); err == nil {
				out = append(out, &task.ProcessInfo{Pid: uint32(pid)})
			}
		}
		return nil
	})
	if err != nil {
		return nil, grpcErr(err)
	}
	return &taskAPI.PidsResponse{Processes: out}, nil
}

// unifiedWithMemory returns the directory of dirs on the unified (v2)
// hierarchy if the memory controller is enabled there (its
// cgroup.controllers lists it), else "". On a hybrid host the session has a
// unified directory without controllers beside its v1 ones: its memory and
// pids are in the v1 directories.
func unifiedWithMemory(dirs []string) string {
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "cgroup.controllers"))
		if err != nil {
			continue
		}
		for _, c := range strings.Fields(string(b)) {
			if c == "memory" {
				return d
			}
		}
	}
	return ""
}

// Stats answers cgroup metrics of the session: v2 metrics when the memory
// controller is on the unified hierarchy, else cgroup v1 metrics (memory,
// pids, CPU throttling and usage where cpuacct is in use) from the v1
// directories (a hybrid host's controller-less unified directory is
// skipped: its cpu.stat has v2 keys).
func (s *service) Stats(ctx context.Context, r *taskAPI.StatsRequest) (*taskAPI.StatsResponse, error) {
	if _, err := s.get(""); err != nil {
		return nil, err
	}
	dirs, err := s.sessionCgroups()
	if err != nil {
		return nil, grpcErr(err)
	}
	s.mu.Lock()
	ctr := s.ctr
	s.mu.Unlock()
	var metrics interface{}
	if ctr != "" {
		// A pod's container: its own cgroup's figures (container.get).
		if metrics, err = s.containerMetrics(ctr, unifiedWithMemory(dirs) != ""); err != nil {
			return nil, grpcErr(err)
		}
	} else if d := unifiedWithMemory(dirs); d != "" {
		m := &v2.Metrics{Pids: &v2.PidsStat{}, Memory: &v2.MemoryStat{}, CPU: &v2.CPUStat{}}
		m.Pids.Current, _ = readUint(d, "pids.current")
		m.Pids.Limit, _ = readUint(d, "pids.max")
		m.Memory.Usage, _ = readUint(d, "memory.current")
		m.Memory.UsageLimit, _ = readUint(d, "memory.max")
		c := readKV(d, "cpu.stat")
		m.CPU.UsageUsec, m.CPU.UserUsec, m.CPU.SystemUsec = c["usage_usec"], c["user_usec"], c["system_usec"]
		m.CPU.NrPeriods, m.CPU.NrThrottled, m.CPU.ThrottledUsec = c["nr_periods"], c["nr_throttled"], c["throttled_usec"]
		metrics = m
	} else {
		m := &v1.Metrics{}
		unified := ""
		for _, d := range dirs {
			if _, err := os.Stat(filepath.Join(d, "cgroup.controllers")); err == nil {
				unified = d
				continue
			}
			if n, ok := readUint(d, "pids.current"); ok {
				m.Pids = &v1.PidsStat{Current: n}
				m.Pids.Limit, _ = readUint(d, "pids.max")
			}
			if n, ok := readUint(d, "memory.usage_in_bytes"); ok {
				m.Memory = &v1.MemoryStat{Usage: &v1.MemoryEntry{Usage: n}}
				m.Memory.Usage.Limit, _ = readUint(d, "memory.limit_in_bytes")
				m.Memory.Usage.Max, _ = readUint(d, "memory.max_usage_in_bytes")
				m.Memory.Usage.Failcnt, _ = readUint(d, "memory.failcnt")
				st := readKV(d, "memory.stat")
				m.Memory.Cache, m.Memory.RSS = st["cache"], st["rss"]
				// The CRI's working set is usage - total_inactive_file.
				m.Memory.TotalInactiveFile, m.Memory.InactiveFile = st["total_inactive_file"], st["inactive_file"]
				m.Memory.TotalCache, m.Memory.TotalRSS = st["total_cache"], st["total_rss"]
			}
			if c := readKV(d, "cpu.stat"); c != nil {
				if m.CPU == nil {
					m.CPU = &v1.CPUStat{Usage: &v1.CPUUsage{}}
				}
				m.CPU.Throttling = &v1.Throttle{Periods: c["nr_periods"], ThrottledPeriods: c["nr_throttled"],
					ThrottledTime: c["throttled_time"]}
			}
			if n, ok := readUint(d, "cpuacct.usage"); ok {
				if m.CPU == nil {
					m.CPU = &v1.CPUStat{Usage: &v1.CPUUsage{}}
				}
				m.CPU.Usage.Total = n
			}
		}
		if unified == "" || (m.CPU != nil && m.CPU.Usage.Total != 0) {
			// cpuacct.usage was read (or there is nothing else to read).
		} else if c := readKV(unified, "cpu.stat"); c["usage_usec"] > 0 {
			// cpuacct not beside cpu (mounted on its own, or absent): a
			// hybrid host's unified directory still accounts CPU time.
			if m.CPU == nil {
				m.CPU = &v1.CPUStat{Usage: &v1.CPUUsage{}}
			}
			m.CPU.Usage.Total, m.CPU.Usage.User, m.CPU.Usage.Kernel = c["usage_usec"]*1000, c["user_usec"]*1000, c["system_usec"]*1000
		}
		metrics = m
	}
	a, err := typeurl.MarshalAny(metrics)
	if err != nil {
		return nil, grpcErr(err)
	}
	return &taskAPI.StatsResponse{Stats: a}, nil
}

// containerMetrics answers Stats for a pod's container from container.get
// (its own child cgroup: usage, peak, limit, CPU time in ms, pids), as v2
// metrics when v2 (the session's memory controller is unified) else v1.
// The working set the CRI derives is the usage (no inactive file figure).
func (s *service) containerMetrics(ctr string, v2Metrics bool) (interface{}, error) {
	var c struct {
		Limits struct {
			MemoryMiB uint64 `json:"memoryMiB"`
			PidsMax   uint64 `json:"pidsMax"`
		} `json:"limits"`
		Usage struct {
			CPUMs           *uint64 `json:"cpuMs"`
			MemoryBytes     *uint64 `json:"memoryBytes"`
			MemoryPeakBytes *uint64 `json:"memoryPeakBytes"`
			Pids            *uint64 `json:"pids"`
		} `json:"usage"`
	}
	if err := s.rpc.call("container.get", map[string]interface{}{"sandbox": s.name, "name": ctr}, &c); err != nil {
		return nil, err
	}
	val := func(p *uint64) uint64 {
		if p == nil {
			return 0
		}
		return *p
	}
	u := c.Usage
	if v2Metrics {
		m := &v2.Metrics{Pids: &v2.PidsStat{Current: val(u.Pids), Limit: c.Limits.PidsMax},
			Memory: &v2.MemoryStat{Usage: val(u.MemoryBytes), UsageLimit: c.Limits.MemoryMiB << 20},
			CPU:    &v2.CPUStat{UsageUsec: val(u.CPUMs) * 1000}}
		return m, nil
	}
	return &v1.Metrics{Pids: &v1.PidsStat{Current: val(u.Pids), Limit: c.Limits.PidsMax},
		Memory: &v1.MemoryStat{Usage: &v1.MemoryEntry{Usage: val(u.MemoryBytes), Max: val(u.MemoryPeakBytes), Limit: c.Limits.MemoryMiB << 20}},
		CPU:    &v1.CPUStat{Usage: &v1.CPUUsage{Total: val(u.CPUMs) * 1000000}}}, nil
}
