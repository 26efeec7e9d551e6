package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/agentgate/agentgate/internal/instance/agents"
	"github.com/agentgate/agentgate/internal/instance/errs"
	"github.com/agentgate/agentgate/internal/instance/events"
	"github.com/agentgate/agentgate/internal/instance/ids"
	"github.com/agentgate/agentgate/internal/store"
)

// CreateInput is a new session. Nil fields take their defaults.
type CreateInput struct {
	ID          *string
	ParentID    *string
	Title       *string
	Agent       *string
	Model       *agents.ModelRef
	Metadata    map[string]json.RawMessage
	Permissions []agents.PermissionRule
	// Directory is the location of a root session ("" for the default);
	// a child session takes its parent's.
	Directory string
}

// Create makes a session and announces it (session.created).
func (s *Service) Create(ctx context.Context, in CreateInput) (*Info, error) {
	now := s.NowMS()
	info := &Info{Time: Time{Created: now, Updated: now}, Metadata: in.Metadata, Permissions: in.Permissions, Model: in.Model}
	if in.ID != nil {
		if err := CheckID("id", *in.ID); err != nil {
			return nil, err
		}
		info.ID = *in.ID
	} else {
		info.ID = ids.New("ses", true, s.Clock.Now())
	}
	if in.ParentID != nil {
		if err := CheckID("parentID", *in.ParentID); err != nil {
			return nil, err
		}
		info.ParentID = *in.ParentID
	}
	if err := errors.Join(validateModel(in.Model, "model"), validateRules(in.Permissions)); err != nil {
		return nil, err
	}
	if in.Agent != nil {
		info.Agent = *in.Agent
	}
	switch {
	case in.Title != nil && *in.Title != "":
		info.Title = *in.Title
	case info.ParentID != "":
		info.Title = defaultTitle("Child session", now)
	default:
		info.Title = defaultTitle("New session", now)
	}
	if info.ParentID == "" {
		clean, pid, sub, err := s.Locations.Placement(in.Directory)
		if err != nil {
			return nil, err
		}
		info.Location, info.ProjectID, info.Subpath = events.LocationRef{Directory: clean}, pid, sub
	}
	err := s.WriteTx(ctx, func(tx store.Tx) error {
		if info.ParentID != "" {
			parent, err := s.Info(tx, info.ParentID)
			if err != nil {
				return err
			}
			info.Location, info.ProjectID, info.Subpath = parent.Location, parent.ProjectID, parent.Subpath
			if in.Metadata == nil {
				info.Metadata = parent.Metadata
			}
		}
		err := s.PutInfo(tx, info, true)
		if errors.Is(err, store.ErrExists) {
			return errs.Conflict("Session already exists: "+info.ID, info.ID)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	s.Publish("session.created", info, map[string]any{"info": info})
	return info, nil
}

// Get reads a session.
func (s *Service) Get(ctx context.Context, id string) (*Info, error) {
	var info *Info
	err := s.ReadTx(ctx, func(tx store.Tx) (err error) {
		info, err = s.Info(tx, id)
		return err
	})
	return info, err
}

// UpdateInput changes a session; nil fields stay. An empty title is made
// from the session's first input.
type UpdateInput struct {
	Title       *string
	Metadata    map[string]json.RawMessage
	Permissions []agents.PermissionRule
}

// Update changes a session and announces it (session.updated).
func (s *Service) Update(ctx context.Context, id string, in UpdateInput) (*Info, error) {
	if err := validateRules(in.Permissions); err != nil {
		return nil, err
	}
	var info *Info
	err := s.WriteTx(ctx, func(tx store.Tx) (err error) {
		info, err = s.Info(tx, id)
		if err != nil {
			return err
		}
		if in.Title != nil {
			info.Title = *in.Title
			if info.Title == "" {
				if info.Title, err = s.generateTitle(tx, info); err != nil {
					return err
				}
			}
		}
		if in.Metadata != nil {
			info.Metadata = in.Metadata
		}
		if in.Permissions != nil {
			info.Permissions = in.Permissions
		}
		info.Time.Updated = max(s.NowMS(), info.Time.Updated)
		return s.PutInfo(tx, info, false)
	})
	if err != nil {
		return nil, err
	}
	s.Publish("session.updated", info, map[string]any{"info": info})
	return info, nil
}

// SetGeneratedTitle gives a session the title its title agent made, only
// while the session keeps its placeholder title: a title set meanwhile
// (a rename) wins. It reports whether the title was set, and announces it
// (session.updated).
func (s *Service) SetGeneratedTitle(ctx context.Context, id, title string) (bool, error) {
	var info *Info
	set := false
	err := s.WriteTx(ctx, func(tx store.Tx) (err error) {
		if info, err = s.Info(tx, id); err != nil {
			return err
		}
		if set = title != "" && IsDefaultTitle(info.Title); !set {
			return nil
		}
		info.Title = title
		info.Time.Updated = max(s.NowMS(), info.Time.Updated)
		return s.PutInfo(tx, info, false)
	})
	if err != nil || !set {
		return false, err
	}
	s.Publish("session.updated", info, map[string]any{"info": info})
	return true, nil
}

// generateTitle makes a title from the first line of the session's first
// user input, or the default title when it has none.
func (s *Service) generateTitle(tx store.Tx, info *Info) (string, error) {
	text := ""
	find := func(raw []byte) (bool, error) {
		var m struct {
			Type    string `json:"type"`
			Text    string `json:"text"`
			Payload struct {
				Text string `json:"text"`
			} `json:"payload"`
		}
		if json.Unmarshal(raw, &m) != nil || m.Type != "user" {
			return true, nil
		}
		text = m.Text + m.Payload.Text
		return text == "", nil
	}
	inst := s.InstanceName()
	if err := tx.SessionItems(inst, info.ID, store.ItemMessage, find); err != nil {
		return "", err
	}
	if text == "" {
		if err := tx.SessionItems(inst, info.ID, store.ItemInbox, find); err != nil {
			return "", err
		}
	}
	text = strings.TrimSpace(strings.SplitN(strings.TrimSpace(text), "\n", 2)[0])
	if text == "" {
		return defaultTitle("New session", info.Time.Created), nil
	}
	if r := []rune(text); len(r) > 50 {
		text = strings.TrimSpace(string(r[:50])) + "…"
	}
	return text, nil
}

// Remove deletes a session and its descendants; their drains stop, and
// each removal is announced (session.deleted).
func (s *Service) Remove(ctx context.Context, id string) error {
	var info *Info
	var removed []string
	err := s.WriteTx(ctx, func(tx store.Tx) (err error) {
		if info, err = s.Info(tx, id); err != nil {
			return err
		}
		removed, err = tx.DeleteInstanceSessionTree(s.InstanceName(), id)
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		return errs.SessionNotFound(id)
	}
	if err != nil {
		return err
	}
	for _, rid := range removed {
		if c, ok := s.Drains.(PendingCanceller); ok {
			c.CancelPending(rid, "", "removed")
		}
		if s.Drains != nil {
			s.Drains.Interrupt(rid) // its drain ends: the session is gone
		}
		s.Bus.Publish("session.deleted", &info.Location, map[string]any{"sessionID": rid})
	}
	return nil
}

// PendingCanceller is implemented by Drains that hold permission requests
// and forms a session's tool calls wait on: removal cancels them.
type PendingCanceller interface {
	CancelPending(sessionID, directory, why string)
}

// Active lists the sessions whose drain runs in this process.
func (s *Service) Active() []string {
	if s.Drains == nil {
		return nil
	}
	return s.Drains.Active()
}

// Interrupt stops the session's running step (outcome "interrupted");
// inputs admitted but not yet taken stay admitted and are processed
// afterwards.
func (s *Service) Interrupt(ctx context.Context, sid string) error {
	if _, err := s.Get(ctx, sid); err != nil {
		return err
	}
	if s.Drains != nil {
		s.Drains.Interrupt(sid)
	}
	return nil
}

// Fork copies a session's messages before a message (all of them when
// before is nil) into a new child session.
func (s *Service) Fork(ctx context.Context, sid string, before *string) (*Info, error) {
	return s.ForkWith(ctx, sid, ForkOptions{Before: before})
}

// ForkOptions shapes a fork.
type ForkOptions struct {
	// Before is the message the copy stops at (it and the messages after
	// it are left out); nil copies every message.
	Before *string
	// Root makes the copy a root session of the source's location, titled
	// "<title> (fork #n)", as the released OpenCode server's fork does
	// (its TUI lists it with the other sessions and opens it); a copy with
	// no messages is then allowed (a fork at the first message). Without
	// Root the copy is a child of the source, titled "<title> (fork)", and
	// an empty copy is refused.
	Root bool
}

// ForkWith copies a session's messages into a new session (see
// ForkOptions) and announces it (session.created). The copy keeps the
// source's agent, model, location, metadata and permission rules; not its
// cost, tokens, steps, outcome, revert or share link.
func (s *Service) ForkWith(ctx context.Context, sid string, o ForkOptions) (*Info, error) {
	before := o.Before
	if before != nil {
		if err := CheckMessageID("before", *before); err != nil {
			return nil, err
		}
	}
	now := s.NowMS()
	var child *Info
	err := s.WriteTx(ctx, func(tx store.Tx) error {
		src, err := s.Info(tx, sid)
		if err != nil {
			return err
		}
		msgs, err := s.Messages(tx, sid)
		if err != nil {
			return err
		}
		fork := &Fork{SessionID: sid}
		if before != nil {
			i := 0
			for i < len(msgs) && msgs[i].Header.ID != *before {
				i++
			}
			if i == len(msgs) {
				return errs.MessageNotFound(sid, *before)
			}
			msgs = msgs[:i]
			fork.Boundary.Type, fork.Boundary.MessageID = "before", *before
		} else if len(msgs) > 0 {
			fork.Boundary.Type, fork.Boundary.MessageID = "through", msgs[len(msgs)-1].Header.ID
		} else if o.Root {
			fork = nil // nothing copied and no boundary to name
		}
		if len(msgs) == 0 && !o.Root {
			return errs.InvalidRequest("empty_session", "Session has no messages to fork: "+sid)
		}
		c := *src
		c.ID = ids.New("ses", true, s.Clock.Now())
		c.ParentID, c.Fork = sid, fork
		c.Time = Time{Created: now, Updated: now}
		c.Title = src.Title + " (fork)"
		if o.Root {
			c.ParentID, c.Title = "", ForkedTitle(src.Title)
		}
		c.Cost, c.Tokens, c.Steps, c.Outcome, c.Revert, c.Share = 0, TokenUsage{}, nil, "", nil, nil
		child = &c
		if err := s.PutInfo(tx, child, true); err != nil {
			return err
		}
		for _, m := range msgs {
			var obj map[string]json.RawMessage
			if err := json.Unmarshal(m.Raw, &obj); err != nil {
				return fmt.Errorf("%w: %v", errUndecodable, err)
			}
			nid := s.NewID("msg")
			obj["id"], _ = json.Marshal(nid)
			raw, err := json.Marshal(obj)
			if err != nil {
				return err
			}
			if err := tx.AppendSessionItem(s.InstanceName(), child.ID, store.ItemMessage, nid, raw); err != nil {
				return err
			}
		}
		return nil
	})
	if errors.Is(err, errUndecodable) {
		return nil, errs.Unknown(s.Logger, "fork: "+sid, err)
	}
	if err != nil {
		return nil, err
	}
	s.Publish("session.created", child, map[string]any{"info": child})
	return child, nil
}

// forkNumber matches a title that ForkedTitle made.
var forkNumber = regexp.MustCompile(`^(.+) \(fork #(\d+)\)$`)

// ForkedTitle is the title of a root fork: "<title> (fork #1)", or the
// next number when the title is a fork's already.
func ForkedTitle(title string) string {
	if m := forkNumber.FindStringSubmatch(title); m != nil {
		if n, err := strconv.Atoi(m[2]); err == nil && n < math.MaxInt32 {
			return fmt.Sprintf("%s (fork #%d)", m[1], n+1)
		}
	}
	return title + " (fork #1)"
}

// SetShare sets (or, with nil, removes) the session's share link and
// announces the change (session.updated).
func (s *Service) SetShare(ctx context.Context, sid string, share *Share) (*Info, error) {
	var info *Info
	err := s.WriteTx(ctx, func(tx store.Tx) (err error) {
		if info, err = s.Info(tx, sid); err != nil {
			return err
		}
		info.Share = share
		info.Time.Updated = max(s.NowMS(), info.Time.Updated)
		return s.PutInfo(tx, info, false)
	})
	if err != nil {
		return nil, err
	}
	s.Publish("session.updated", info, map[string]any{"info": info})
	return info, nil
}

// SwitchAgent sets the session's agent, recorded as an agent-switched
// message.
func (s *Service) SwitchAgent(ctx context.Context, sid, agent string) (*Info, error) {
	if agent == "" {
		return nil, errs.Field("agent", "agent is required")
	}
	return s.switchRecorded(ctx, sid, "agent-switched", func(info *Info, msg map[string]any) {
		msg["agent"] = agent
		if info.Agent != "" {
			msg["previous"] = info.Agent
		}
		info.Agent = agent
	})
}

// SwitchModel sets the session's model, recorded as a model-switched
// message.
func (s *Service) SwitchModel(ctx context.Context, sid string, model *agents.ModelRef) (*Info, error) {
	if model == nil {
		return nil, errs.Field("model", "model is required")
	}
	if err := validateModel(model, "model"); err != nil {
		return nil, err
	}
	return s.switchRecorded(ctx, sid, "model-switched", func(info *Info, msg map[string]any) {
		msg["model"] = model
		if info.Model != nil {
			msg["previous"] = info.Model
		}
		info.Model = model
	})
}

// switchRecorded applies a change to the session and records it as a
// message, in one transaction.
func (s *Service) switchRecorded(ctx context.Context, sid, typ string, apply func(*Info, map[string]any)) (*Info, error) {
	var info *Info
	var switched map[string]any
	err := s.WriteTx(ctx, func(tx store.Tx) (err error) {
		if info, err = s.Info(tx, sid); err != nil {
			return err
		}
		now := s.NowMS()
		msg := s.NewMessage(typ, now)
		apply(info, msg)
		if err := s.AppendMessage(tx, sid, msg); err != nil {
			return err
		}
		switched = map[string]any{"messageID": msg["id"]}
		if typ == "agent-switched" {
			switched["agent"] = msg["agent"]
		} else {
			switched["model"] = msg["model"]
		}
		info.Time.Updated = max(now, info.Time.Updated)
		return s.PutInfo(tx, info, false)
	})
	if err != nil {
		return nil, err
	}
	s.PublishEvents(info, Ev{"session.next." + strings.Replace(typ, "-", ".", 1), switched}, Ev{"session.updated", map[string]any{"info": info}})
	return info, nil
}

// Move changes the session's location: at once when no drain runs, else
// at the drain's next delivery boundary (delivery "steer": the next step;
// "queue": after the inputs before it).
func (s *Service) Move(ctx context.Context, sid, dir, delivery string) (*Info, error) {
	if dir == "" {
		return nil, errs.Field("directory", "directory is required")
	}
	switch delivery {
	case "steer", "queue":
	default:
		return nil, errs.Field("delivery", `delivery must be "steer" or "queue"`)
	}
	if fi, err := os.Stat(dir); err != nil {
		if os.IsNotExist(err) {
			return nil, errs.Field("directory", "Directory does not exist: "+dir)
		}
		return nil, errs.Field("directory", "Directory is unavailable: "+dir)
	} else if !fi.IsDir() {
		return nil, errs.Field("directory", "Not a directory: "+dir)
	}
	clean, pid, sub, err := s.Locations.Placement(dir)
	if err != nil {
		var e *errs.Error
		if errors.As(err, &e) && e.Status == 400 {
			return nil, errs.Field("directory", errs.Message(e))
		}
		return nil, errs.Field("directory", "Directory is unavailable: "+dir)
	}
	var info *Info
	var moved map[string]any
	err = s.WriteTx(ctx, func(tx store.Tx) (err error) {
		moved = nil
		if info, err = s.Info(tx, sid); err != nil {
			return err
		}
		now := s.NowMS()
		target := map[string]any{"location": events.LocationRef{Directory: clean}, "projectID": pid}
		if sub != "" {
			target["subpath"] = sub
		}
		if s.Drains != nil && s.Drains.IsActive(sid) {
			// A drain runs: the move waits for its delivery boundary.
			item := map[string]any{"id": s.NewID("msg"), "sessionID": sid,
				"time": map[string]any{"created": now}, "type": "move", "delivery": delivery}
			for k, v := range target {
				item[k] = v
			}
			raw, err := json.Marshal(item)
			if err != nil {
				return err
			}
			return tx.AppendSessionItem(s.InstanceName(), sid, store.ItemInbox, item["id"].(string), raw)
		}
		msg := SwitchLocation(info, s.NewID("msg"), now, events.LocationRef{Directory: clean}, pid, sub)
		if err := s.AppendMessage(tx, sid, msg); err != nil {
			return err
		}
		moved = map[string]any{"location": info.Location}
		if sub != "" {
			moved["subdirectory"] = sub
		}
		return s.PutInfo(tx, info, false)
	})
	if err != nil {
		return nil, err
	}
	if moved != nil {
		s.PublishEvents(info, Ev{"session.next.moved", moved}, Ev{"session.updated", map[string]any{"info": info}})
	} else {
		s.Publish("session.updated", info, map[string]any{"info": info})
	}
	return info, nil
}

// SwitchLocation moves info to a location, projectID and subpath, and
// returns the location-switched message (id, created now) that records
// the move with the previous location.
func SwitchLocation(info *Info, id string, now int64, loc events.LocationRef, projectID, subpath string) map[string]any {
	msg := map[string]any{"id": id, "type": "location-switched", "time": map[string]any{"created": now},
		"location": loc, "projectID": projectID}
	if subpath != "" {
		msg["subpath"] = subpath
	}
	prev := map[string]any{"location": info.Location, "projectID": info.ProjectID}
	if info.Subpath != "" {
		prev["subpath"] = info.Subpath
	}
	msg["previous"] = prev
	info.Location, info.ProjectID, info.Subpath = loc, projectID, subpath
	info.Time.Updated = max(now, info.Time.Updated)
	return msg
}
