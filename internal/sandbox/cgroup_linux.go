package sandbox

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// cgroups limits a sandbox's memory and process count through the
// host's cgroup controllers, where the server may create groups: v1
// controllers mounted at /sys/fs/cgroup/<controller>, or a v2 hierarchy
// whose root offers them. Each run gets a group of its own under an
// "agentgate" parent, removed when it ends.
type cgroups struct {
	lim    Limits
	memory string // parent directory, "" when unavailable
	pids   string
	v2     bool
	why    map[string]string // controller → why it is unavailable
}

const cgroupRoot = "/sys/fs/cgroup"

func newCgroups(lim Limits) *cgroups {
	c := &cgroups{lim: lim, why: map[string]string{}}
	if b, err := os.ReadFile(cgroupRoot + "/cgroup.controllers"); err == nil {
		// A v2 hierarchy at the root: its controllers are enabled for our
		// parent group through subtree_control.
		c.v2 = true
		have := strings.Fields(string(b))
		parent := filepath.Join(cgroupRoot, "agentgate")
		for _, ctl := range []string{"memory", "pids"} {
			if !contains(have, ctl) {
				c.why[ctl] = "the cgroup v2 hierarchy has no " + ctl + " controller"
				continue
			}
			if err := os.WriteFile(cgroupRoot+"/cgroup.subtree_control", []byte("+"+ctl), 0); err != nil {
				c.why[ctl] = "cannot enable the " + ctl + " controller: " + err.Error()
				continue
			}
			if err := os.MkdirAll(parent, 0o755); err != nil {
				c.why[ctl] = "cannot create a cgroup: " + err.Error()
				continue
			}
			if err := os.WriteFile(parent+"/cgroup.subtree_control", []byte("+"+ctl), 0); err != nil {
				c.why[ctl] = "cannot enable the " + ctl + " controller: " + err.Error()
				continue
			}
			if ctl == "memory" {
				c.memory = parent
			} else {
				c.pids = parent
			}
		}
		return c
	}
	for _, ctl := range []string{"memory", "pids"} {
		dir := filepath.Join(cgroupRoot, ctl)
		if _, err := os.Stat(filepath.Join(dir, "cgroup.procs")); err != nil {
			c.why[ctl] = "no cgroup " + ctl + " controller is mounted"
			continue
		}
		parent := filepath.Join(dir, "agentgate")
		if err := os.MkdirAll(parent, 0o755); err != nil {
			c.why[ctl] = "the cgroup " + ctl + " controller is not writable by the server (" + err.Error() + ")"
			continue
		}
		if ctl == "memory" {
			c.memory = parent
		} else {
			c.pids = parent
		}
	}
	return c
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// describe says how a limit is enforced, or why it is not.
func (c *cgroups) describe(ctl, value string) string {
	dir := c.memory
	if ctl == "pids" {
		dir = c.pids
	}
	if dir == "" {
		return "not enforced: " + c.why[ctl]
	}
	v := "v1"
	if c.v2 {
		v = "v2"
	}
	return fmt.Sprintf("%s (cgroup %s %s)", value, v, ctl)
}

// group is one run's cgroups.
type group struct {
	c           *cgroups
	memory      string
	pids        string
	memFailBase int64
}

// create makes a run's groups with their limits; nil when no controller
// is available.
func (c *cgroups) create() *group {
	if c.memory == "" && c.pids == "" {
		return nil
	}
	b := make([]byte, 8)
	rand.Read(b)
	id := "run-" + hex.EncodeToString(b)
	g := &group{c: c}
	if c.memory != "" && c.lim.Memory > 0 {
		dir := filepath.Join(c.memory, id)
		if os.Mkdir(dir, 0o755) == nil {
			file := "memory.limit_in_bytes"
			if c.v2 {
				file = "memory.max"
				os.WriteFile(filepath.Join(dir, "memory.swap.max"), []byte("0"), 0)
			}
			if os.WriteFile(filepath.Join(dir, file), []byte(strconv.FormatInt(c.lim.Memory, 10)), 0) == nil {
				g.memory = dir
			} else {
				os.Remove(dir)
			}
		}
	}
	if c.pids != "" && c.lim.Processes > 0 {
		dir := filepath.Join(c.pids, id)
		if c.v2 && g.memory != "" {
			dir = g.memory // one v2 group holds both controllers
		} else if os.Mkdir(dir, 0o755) != nil {
			dir = ""
		}
		if dir != "" && os.WriteFile(filepath.Join(dir, "pids.max"), []byte(strconv.Itoa(c.lim.Processes)), 0) == nil {
			g.pids = dir
		}
	}
	if g.memory == "" && g.pids == "" {
		return nil
	}
	return g
}

// add moves a process (before it starts anything) into the groups.
func (g *group) add(pid int) error {
	for _, dir := range g.dirs() {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
			return err
		}
	}
	return nil
}

func (g *group) dirs() []string {
	var out []string
	for _, d := range []string{g.memory, g.pids} {
		if d != "" && !contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

// hit names the limit the run reached, if any.
func (g *group) hit() string {
	if g.memory != "" {
		if g.c.v2 {
			if counter(filepath.Join(g.memory, "memory.events"), "oom_kill") > 0 || counter(filepath.Join(g.memory, "memory.events"), "max") > 0 {
				return "memory"
			}
		} else if counter(filepath.Join(g.memory, "memory.oom_control"), "oom_kill") > 0 {
			return "memory"
		} else if b, err := os.ReadFile(filepath.Join(g.memory, "memory.failcnt")); err == nil && strings.TrimSpace(string(b)) != "0" {
			return "memory"
		}
	}
	if g.pids != "" && counter(filepath.Join(g.pids, "pids.events"), "max") > 0 {
		return "processes"
	}
	return ""
}

// counter reads "name N" from a cgroup's key-value file.
func counter(file, name string) int64 {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == name {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// remove deletes the groups once their processes are gone (the kernel
// takes a moment to release a namespace's last processes).
func (g *group) remove() {
	for _, dir := range g.dirs() {
		for i := 0; i < 50; i++ {
			if err := os.Remove(dir); err == nil || os.IsNotExist(err) {
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
}
