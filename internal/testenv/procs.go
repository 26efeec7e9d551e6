package testenv

import (
	"os"
	"strconv"
	"strings"
)

// HostProcesses lists the processes of this machine (as its /proc shows
// them) whose command line, arguments joined by spaces, holds sub: "pid:
// command line" each. Tests use it to find processes that outlived what
// should have ended them.
func HostProcesses(sub string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if c := strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " ")); strings.Contains(c, sub) {
			out = append(out, e.Name()+": "+c)
		}
	}
	return out
}
