package instance

import (
	"context"
	"path/filepath"
	"strconv"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/dustin/go-humanize"
	"go.uber.org/zap"

	"github.com/agentgate/agentgate/internal/instance/snapshot"
	"github.com/agentgate/agentgate/modules/agentgate"
)

// Snapshots configures the file snapshots the agent takes around the
// steps that may change files (kept in the data directory, one git
// directory per project), which revert and redo put back.
type Snapshots struct {
	// Off takes no snapshots: reverts then hide messages only, and say
	// that files cannot be put back.
	Off bool `json:"off,omitempty"`
	// MaxFileSize leaves larger files out (default 2 MiB).
	MaxFileSize int64 `json:"max_file_size,omitempty"`
	// MaxFiles bounds the files of a project's snapshots (default
	// 200,000); past it new files are left out and the snapshot is marked
	// incomplete.
	MaxFiles int `json:"max_files,omitempty"`
	// Quota bounds the disk a project's snapshots use (default 2 GiB);
	// past it changed files are left out and the snapshot is marked
	// incomplete.
	Quota int64 `json:"quota,omitempty"`
}

// snapshots makes the instance's snapshot manager: its directory is the
// data directory's snapshots/<instance name>; a collection keeps the
// trees the instance's live sessions use.
func (in *Instance) snapshots(app *agentgate.App) *snapshot.Manager {
	c := in.Snapshots
	if c == nil {
		c = &Snapshots{}
	}
	m := snapshot.New(snapshot.Config{Dir: filepath.Join(app.DataDir(), "snapshots", in.Name), Off: c.Off,
		MaxFileSize: c.MaxFileSize, MaxFiles: c.MaxFiles, Quota: c.Quota, Logger: in.logger.Named("snapshots"),
		Keep: func(ctx context.Context, root string) ([]string, error) {
			if in.server == nil {
				return nil, context.Canceled
			}
			return in.server.Sessions().SnapshotTrees(ctx, root)
		}})
	if st := m.Status(); st.Mode != "on" {
		in.logger.Warn("file snapshots are not taken: reverts cannot put files back", zap.String("mode", st.Mode), zap.String("reason", st.Reason))
	}
	return m
}

// unmarshalSnapshots reads `snapshots off` or a snapshots block.
func (in *Instance) unmarshalSnapshots(d *caddyfile.Dispenser) error {
	if in.Snapshots != nil {
		return d.Err("snapshots is declared twice")
	}
	in.Snapshots = &Snapshots{}
	args := d.RemainingArgs()
	switch {
	case len(args) == 1 && args[0] == "off":
		in.Snapshots.Off = true
		if d.NextBlock(d.Nesting()) {
			return d.Err("snapshots off takes no block")
		}
		return nil
	case len(args) > 0:
		return d.Errf("snapshots takes `off` or a block, got %q", args)
	}
	for n := d.Nesting(); d.NextBlock(n); {
		key := d.Val()
		var v string
		if !d.AllArgs(&v) {
			return d.ArgErr()
		}
		switch key {
		case "max_file_size", "quota":
			b, err := humanize.ParseBytes(v)
			if err != nil || b == 0 || b > 1<<50 {
				return d.Errf("snapshots %s: a size such as 2MiB, got %q", key, v)
			}
			if key == "quota" {
				in.Snapshots.Quota = int64(b)
			} else {
				in.Snapshots.MaxFileSize = int64(b)
			}
		case "max_files":
			k, err := strconv.Atoi(v)
			if err != nil || k <= 0 {
				return d.Errf("snapshots max_files: a positive number, got %q", v)
			}
			in.Snapshots.MaxFiles = k
		default:
			return d.Errf("unknown snapshots option %q", key)
		}
	}
	return nil
}
