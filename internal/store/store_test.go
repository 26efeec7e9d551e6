package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/agentgate/agentgate/internal/pgtest"
)

// TestMain stops the PostgreSQL server of the tests, if they started one.
func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

var (
	ctx = context.Background()
	t0  = time.Date(2025, 6, 1, 10, 0, 0, 0, time.UTC)
)

func update(t *testing.T, s Store, fn func(Tx) error) {
	t.Helper()
	if err := s.Update(ctx, fn); err != nil {
		t.Fatalf("Update: %v", err)
	}
}

func view(t *testing.T, s Store, fn func(Tx) error) {
	t.Helper()
	if err := s.View(ctx, fn); err != nil {
		t.Fatalf("View: %v", err)
	}
}

func ptr[T any](v T) *T { return &v }

func equal(t *testing.T, what string, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got  %#v\n want %#v", what, got, want)
	}
}

func isNotFound(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("%s: err = %v, want ErrNotFound", what, err)
	}
}

func ids[T any](list []*T, id func(*T) string) []string {
	out := []string{}
	for _, v := range list {
		out = append(out, id(v))
	}
	return out
}

// grouped describes a record kind that is read by id and listed by a
// group (a workspace, a service account, a person).
type grouped[T any] struct {
	what    string
	recs    []*T
	id      func(*T) string
	missing string // an id that was never written
	get     func(Tx, string) (*T, error)
	list    func(Tx, string) ([]*T, error)
	groups  map[string][]string // group → the ids it lists, in order
}

// checkGrouped reads every record back unchanged, a missing id as
// ErrNotFound, and each group's list in id order with whole records.
func checkGrouped[T any](t *testing.T, s Store, g grouped[T]) {
	t.Helper()
	byID := map[string]*T{}
	for _, r := range g.recs {
		byID[g.id(r)] = r
	}
	view(t, s, func(tx Tx) error {
		for _, r := range g.recs {
			got, err := g.get(tx, g.id(r))
			if err != nil {
				t.Fatalf("%s %s: %v", g.what, g.id(r), err)
			}
			equal(t, g.what, got, r)
		}
		_, err := g.get(tx, g.missing)
		isNotFound(t, g.what+" missing", err)
		for group, want := range g.groups {
			list, err := g.list(tx, group)
			if err != nil {
				t.Fatal(err)
			}
			equal(t, fmt.Sprintf("%s list of %s", g.what, group), ids(list, g.id), want)
			for i, r := range list {
				equal(t, fmt.Sprintf("%s list of %s [%d]", g.what, group, i), r, byID[want[i]])
			}
		}
		return nil
	})
}
