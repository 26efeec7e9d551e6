package store

import (
	"errors"
	"testing"
)

func TestMoveSessionItem(t *testing.T) {
	s := newStore(t)
	update(t, s, func(tx Tx) error {
		if err := tx.PutInstanceSession(&InstanceSession{Instance: "i", ID: "ses_1", Directory: "/d", ProjectID: "p", Info: []byte(`{}`)}, true); err != nil {
			return err
		}
		for _, it := range []struct {
			kind byte
			id   string
		}{{ItemInbox, "msg_a"}, {ItemMessage, "msg_b"}, {ItemInbox, "msg_c"}} {
			if err := tx.AppendSessionItem("i", "ses_1", it.kind, it.id, []byte(`"`+it.id+`"`)); err != nil {
				return err
			}
		}
		return tx.MoveSessionItem("i", "ses_1", "msg_a", ItemMessage, []byte(`"msg_a2"`))
	})
	view(t, s, func(tx Tx) error {
		var msgs, inbox []string
		tx.SessionItems("i", "ses_1", ItemMessage, func(raw []byte) (bool, error) { msgs = append(msgs, string(raw)); return true, nil })
		tx.SessionItems("i", "ses_1", ItemInbox, func(raw []byte) (bool, error) { inbox = append(inbox, string(raw)); return true, nil })
		equal(t, "messages", msgs, []string{`"msg_b"`, `"msg_a2"`})
		equal(t, "inbox", inbox, []string{`"msg_c"`})
		k, err := tx.SessionItemKind("i", "ses_1", "msg_a")
		equal(t, "kind", k, ItemMessage)
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.AppendSessionItem("i", "ses_1", ItemMessage, "msg_a", nil); !errors.Is(err, ErrExists) {
			t.Fatalf("id reuse: %v", err)
		}
		if err := tx.MoveSessionItem("i", "ses_1", "msg_zz", ItemMessage, nil); !errors.Is(err, ErrNotFound) {
			t.Fatalf("missing: %v", err)
		}
		return nil
	})
}
