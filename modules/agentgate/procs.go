package agentgate

import (
	"os"
	"runtime"
	"sync"

	"go.uber.org/zap"
)

var procsOnce sync.Once

// ensureProcs gives the Go scheduler at least two Ps. The embedded store
// makes every commit durable with a blocking fsync; a goroutine in such a
// syscall keeps its P until the runtime's monitor takes it back, which can
// take up to 10 ms when the process is otherwise quiet. With a single P
// (one core, or a process pinned to one), requests wait behind that fsync.
// On the benchmark rig (gateway pinned to one core) one P gave 0.50–0.59×
// of plain reverse_proxy's throughput at c=32 where two gave 0.67–1.02×,
// in back-to-back quick runs on a noisy machine. An explicit GOMAXPROCS in
// the environment is respected.
func ensureProcs(logger *zap.Logger) {
	procsOnce.Do(func() {
		if os.Getenv("GOMAXPROCS") != "" || runtime.GOMAXPROCS(0) >= 2 {
			return
		}
		runtime.GOMAXPROCS(2)
		logger.Info("raised GOMAXPROCS from 1 to 2 so that durable store writes do not stall requests (set GOMAXPROCS to override)")
	})
}
