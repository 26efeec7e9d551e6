package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Key layout: one prefix per record kind; "i…/" prefixes are secondary
// indexes whose keys end in the indexed record's id and whose values are empty.
const (
	pMeta      = "m/"
	pWorkspace = "w/"
	pPerson    = "p/"
	pEmail     = "ip/email/" // email → person id (value)
	pMember    = "mb/"       // mb/<ws>/<person>
	pPersonWS  = "ipm/"      // ipm/<person>/<ws>
	pSA        = "sa/"
	pWSSA      = "isa/" // isa/<ws>/<sa>
	pKey       = "k/"
	pSAKey     = "ik/" // ik/<sa>/<key>
	pConn      = "c/"
	pWSConn    = "ic/"  // ic/<ws>/<conn>
	pWSModel   = "wm/"  // wm/<ws>/<workspace model id>
	pPolicy    = "pol/" // pol/<ws>/<policy id>
	pFamily    = "tf/"
	pPersonTF  = "itf/" // itf/<person>/<family>
	pToken     = "t/"
	pBudget    = "b/" // b/<ws>/<member>
	pDevice    = "dg/"
	pUserCode  = "idg/" // idg/<user code mac> → device grant id (value)
	pUsage     = "u/"   // u/<ws>/<usage id>
	pHold      = "h/"   // h/<ws>/<member>/<hold id>
	pConnAudit = "ca/"  // ca/<ws>/<conn>/<change id>
	pCCSet     = "ccs/" // ccs/<ws>: the workspace's Claude Code settings
	pCCHistory = "cch/" // cch/<ws>/<version, 10 digits>
)

// btx implements Tx over a backend's kvTxn: all record logic is here, shared
// by every backend.
type btx struct{ kv kvTxn }

func (t *btx) get(key string, v any) error { return t.kv.Get(key, decodeInto(v)) }

// value returns a copy of the raw value of key.
func (t *btx) value(key string) ([]byte, error) {
	var v []byte
	if err := t.kv.Get(key, copyInto(&v)); err != nil {
		return nil, err
	}
	return v, nil
}

func (t *btx) exists(key string) (bool, error) {
	err := t.kv.Get(key, nil)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

func (t *btx) put(key string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return t.kv.Set(key, b)
}

func (t *btx) setIndex(key string) error { return t.kv.Set(key, nil) }

func (t *btx) del(key string) error { return t.kv.Delete(key) }

// suffixes lists the rest after prefix of every key under prefix.
func (t *btx) suffixes(prefix string) ([]string, error) {
	var out []string
	err := t.kv.Iterate(kvRange{Prefix: prefix, KeysOnly: true}, func(k, _ []byte) (bool, error) {
		out = append(out, string(k[len(prefix):]))
		return true, nil
	})
	return out, err
}

func listBy[T any](t *btx, indexPrefix, recordPrefix string) ([]*T, error) {
	ids, err := t.suffixes(indexPrefix)
	if err != nil {
		return nil, err
	}
	var out []*T
	for _, id := range ids {
		v := new(T)
		if err := t.get(recordPrefix+id, v); err != nil {
			if errors.Is(err, ErrNotFound) {
				continue // an index entry whose record is gone: skip
			}
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// scanAll decodes every record stored under prefix, in key order.
func scanAll[T any](t *btx, prefix string) ([]*T, error) {
	var out []*T
	err := t.kv.Iterate(kvRange{Prefix: prefix}, func(_, b []byte) (bool, error) {
		v := new(T)
		if err := json.Unmarshal(b, v); err != nil {
			return false, err
		}
		out = append(out, v)
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func getAs[T any](t *btx, key string) (*T, error) {
	v := new(T)
	if err := t.get(key, v); err != nil {
		return nil, err
	}
	return v, nil
}

func (t *btx) Workspace(id string) (*Workspace, error) { return getAs[Workspace](t, pWorkspace+id) }

func (t *btx) Workspaces() ([]*Workspace, error) { return scanAll[Workspace](t, pWorkspace) }

func (t *btx) PutWorkspace(w *Workspace) error { return t.put(pWorkspace+w.ID, w) }

func (t *btx) Person(id string) (*Person, error) { return getAs[Person](t, pPerson+id) }

// FoldEmail is the canonical form of an email address for uniqueness.
func FoldEmail(e string) string { return strings.ToLower(strings.TrimSpace(e)) }

func (t *btx) PersonByEmail(email string) (*Person, error) {
	id, err := t.value(pEmail + FoldEmail(email))
	if err != nil {
		return nil, err
	}
	return t.Person(string(id))
}

func (t *btx) PutPerson(p *Person) error {
	p.Email = FoldEmail(p.Email)
	if other, err := t.PersonByEmail(p.Email); err == nil && other.ID != p.ID {
		return fmt.Errorf("email %w", ErrExists)
	} else if err != nil && !errors.Is(err, ErrNotFound) {
		return err
	}
	if old, err := t.Person(p.ID); err == nil && old.Email != p.Email {
		if err := t.del(pEmail + old.Email); err != nil {
			return err
		}
	}
	if err := t.kv.Set(pEmail+p.Email, []byte(p.ID)); err != nil {
		return err
	}
	return t.put(pPerson+p.ID, p)
}

func (t *btx) Member(ws, person string) (*Member, error) {
	return getAs[Member](t, pMember+ws+"/"+person)
}

func (t *btx) Members(ws string) ([]*Member, error) { return scanAll[Member](t, pMember+ws+"/") }

func (t *btx) Memberships(person string) ([]*Member, error) {
	wss, err := t.suffixes(pPersonWS + person + "/")
	if err != nil {
		return nil, err
	}
	var out []*Member
	for _, ws := range wss {
		m, err := t.Member(ws, person)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

func (t *btx) PutMember(m *Member) error {
	if err := t.setIndex(pPersonWS + m.PersonID + "/" + m.Workspace); err != nil {
		return err
	}
	return t.put(pMember+m.Workspace+"/"+m.PersonID, m)
}

func (t *btx) DeleteMember(ws, person string) error {
	if err := t.del(pPersonWS + person + "/" + ws); err != nil {
		return err
	}
	return t.del(pMember + ws + "/" + person)
}

func (t *btx) ServiceAccount(id string) (*ServiceAccount, error) {
	return getAs[ServiceAccount](t, pSA+id)
}

func (t *btx) ServiceAccounts(ws string) ([]*ServiceAccount, error) {
	return listBy[ServiceAccount](t, pWSSA+ws+"/", pSA)
}

func (t *btx) PutServiceAccount(sa *ServiceAccount) error {
	if err := t.setIndex(pWSSA + sa.Workspace + "/" + sa.ID); err != nil {
		return err
	}
	return t.put(pSA+sa.ID, sa)
}

func (t *btx) DeleteServiceAccount(id string) error {
	sa, err := t.ServiceAccount(id)
	if err != nil {
		return err
	}
	if err := t.del(pWSSA + sa.Workspace + "/" + id); err != nil {
		return err
	}
	return t.del(pSA + id)
}

func (t *btx) APIKey(id string) (*APIKey, error) { return getAs[APIKey](t, pKey+id) }

func (t *btx) APIKeys(sa string) ([]*APIKey, error) { return listBy[APIKey](t, pSAKey+sa+"/", pKey) }

func (t *btx) PutAPIKey(k *APIKey, create bool) error {
	if create {
		if ok, err := t.exists(pKey + k.ID); err != nil || ok {
			return errors.Join(err, fmt.Errorf("key id %w", ErrExists))
		}
	}
	if err := t.setIndex(pSAKey + k.ServiceAccount + "/" + k.ID); err != nil {
		return err
	}
	return t.put(pKey+k.ID, k)
}

func (t *btx) Connection(id string) (*Connection, error) { return getAs[Connection](t, pConn+id) }

func (t *btx) Connections(ws string) ([]*Connection, error) {
	return listBy[Connection](t, pWSConn+ws+"/", pConn)
}

func (t *btx) PutConnection(c *Connection, create bool) error {
	old, err := t.Connection(c.ID)
	switch {
	case err == nil && create:
		return fmt.Errorf("connection %s %w", c.ID, ErrExists)
	case err == nil && old.Workspace != c.Workspace:
		if err := t.del(pWSConn + old.Workspace + "/" + c.ID); err != nil {
			return err
		}
	case err != nil && !errors.Is(err, ErrNotFound):
		return err
	}
	if err := t.setIndex(pWSConn + c.Workspace + "/" + c.ID); err != nil {
		return err
	}
	return t.put(pConn+c.ID, c)
}

func (t *btx) DeleteConnection(id string) error {
	c, err := t.Connection(id)
	if err != nil {
		return err
	}
	if err := t.del(pWSConn + c.Workspace + "/" + id); err != nil {
		return err
	}
	return t.del(pConn + id)
}

func (t *btx) PutConnectionChange(c *ConnectionChange) error {
	key := pConnAudit + c.Workspace + "/" + c.Connection + "/" + c.ID
	if ok, err := t.exists(key); err != nil || ok {
		return errors.Join(err, fmt.Errorf("connection change %s %w", c.ID, ErrExists))
	}
	return t.put(key, c)
}

func (t *btx) ConnectionChanges(ws, conn string) ([]*ConnectionChange, error) {
	return scanAll[ConnectionChange](t, pConnAudit+ws+"/"+conn+"/")
}

func (t *btx) WorkspaceModel(ws, id string) (*WorkspaceModel, error) {
	return getAs[WorkspaceModel](t, pWSModel+ws+"/"+id)
}

func (t *btx) WorkspaceModels(ws string) ([]*WorkspaceModel, error) {
	return scanAll[WorkspaceModel](t, pWSModel+ws+"/")
}

func (t *btx) PutWorkspaceModel(m *WorkspaceModel, create bool) error {
	key := pWSModel + m.Workspace + "/" + m.ID
	if create {
		if ok, err := t.exists(key); err != nil || ok {
			return errors.Join(err, fmt.Errorf("model %s %w", m.ID, ErrExists))
		}
	}
	return t.put(key, m)
}

func (t *btx) DeleteWorkspaceModel(ws, id string) error {
	key := pWSModel + ws + "/" + id
	if ok, err := t.exists(key); err != nil || !ok {
		return errors.Join(err, ErrNotFound)
	}
	return t.del(key)
}

func (t *btx) Policies(ws string) ([]*Policy, error) { return scanAll[Policy](t, pPolicy+ws+"/") }

func (t *btx) PutPolicy(p *Policy) error { return t.put(pPolicy+p.Workspace+"/"+p.ID, p) }

func (t *btx) DeletePolicy(ws, id string) error {
	key := pPolicy + ws + "/" + id
	if ok, err := t.exists(key); err != nil || !ok {
		return errors.Join(err, ErrNotFound)
	}
	return t.del(key)
}

func (t *btx) ClaudeCodeSettings(ws string) (*ClaudeCodeSettings, error) {
	return getAs[ClaudeCodeSettings](t, pCCSet+ws)
}

func (t *btx) PutClaudeCodeSettings(c *ClaudeCodeSettings) error { return t.put(pCCSet+c.Workspace, c) }

func (t *btx) PutClaudeCodeSettingsChange(c *ClaudeCodeSettingsChange) error {
	key := fmt.Sprintf("%s%s/%010d", pCCHistory, c.Workspace, c.Version)
	if ok, err := t.exists(key); err != nil || ok {
		return errors.Join(err, fmt.Errorf("claude code settings version %d %w", c.Version, ErrExists))
	}
	return t.put(key, c)
}

func (t *btx) ClaudeCodeSettingsChanges(ws string) ([]*ClaudeCodeSettingsChange, error) {
	return scanAll[ClaudeCodeSettingsChange](t, pCCHistory+ws+"/")
}

func (t *btx) TokenFamily(id string) (*TokenFamily, error) { return getAs[TokenFamily](t, pFamily+id) }

func (t *btx) TokenFamilies(person string) ([]*TokenFamily, error) {
	return listBy[TokenFamily](t, pPersonTF+person+"/", pFamily)
}

func (t *btx) PutTokenFamily(f *TokenFamily) error {
	if err := t.setIndex(pPersonTF + f.PersonID + "/" + f.ID); err != nil {
		return err
	}
	return t.put(pFamily+f.ID, f)
}

func (t *btx) Token(id string) (*Token, error) { return getAs[Token](t, pToken+id) }

func (t *btx) PutToken(tok *Token, create bool) error {
	if create {
		if ok, err := t.exists(pToken + tok.ID); err != nil || ok {
			return errors.Join(err, fmt.Errorf("token id %w", ErrExists))
		}
	}
	return t.put(pToken+tok.ID, tok)
}

func (t *btx) DeviceGrant(id string) (*DeviceGrant, error) { return getAs[DeviceGrant](t, pDevice+id) }

func (t *btx) DeviceGrantByUserCode(mac string) (*DeviceGrant, error) {
	id, err := t.value(pUserCode + mac)
	if err != nil {
		return nil, err
	}
	return t.DeviceGrant(string(id))
}

func (t *btx) PutDeviceGrant(g *DeviceGrant, create bool) error {
	if create {
		for _, k := range []string{pDevice + g.ID, pUserCode + g.UserCodeMAC} {
			if ok, err := t.exists(k); err != nil || ok {
				return errors.Join(err, fmt.Errorf("device grant %w", ErrExists))
			}
		}
		if err := t.kv.Set(pUserCode+g.UserCodeMAC, []byte(g.ID)); err != nil {
			return err
		}
	}
	return t.put(pDevice+g.ID, g)
}

func (t *btx) Budget(ws, member string) (*Budget, error) {
	return getAs[Budget](t, pBudget+ws+"/"+member)
}

func (t *btx) Budgets(ws string) ([]*Budget, error) { return scanAll[Budget](t, pBudget+ws+"/") }

func (t *btx) PutBudget(b *Budget) error { return t.put(pBudget+b.Workspace+"/"+b.MemberID, b) }

func (t *btx) DeleteBudget(ws, member string) error { return t.del(pBudget + ws + "/" + member) }

func (t *btx) Holds(ws, member string) ([]*Hold, error) {
	return scanAll[Hold](t, pHold+ws+"/"+member+"/")
}

func (t *btx) PutHold(h *Hold) error {
	return t.put(pHold+h.Workspace+"/"+h.MemberID+"/"+h.ID, h)
}

func (t *btx) DeleteHold(ws, member, id string) error {
	return t.del(pHold + ws + "/" + member + "/" + id)
}

func (t *btx) PutUsage(u *UsageRecord) error {
	key := pUsage + u.Workspace + "/" + u.ID
	ins, insert := t.kv.(kvInserter)
	if !insert {
		if ok, err := t.exists(key); err != nil || ok {
			return errors.Join(err, fmt.Errorf("usage record %w", ErrExists))
		}
	}
	return t.putUsage(key, u, ins)
}

func (t *btx) AppendUsage(u *UsageRecord) error {
	ins, _ := t.kv.(kvInserter)
	return t.putUsage(pUsage+u.Workspace+"/"+u.ID, u, ins)
}

// putUsage writes a usage record under key in its stored form
// (usage_bin.go): inserted when ins is set (the key's check deferred to
// the commit), else set.
func (t *btx) putUsage(key string, u *UsageRecord, ins kvInserter) error {
	b, err := appendUsage(make([]byte, 0, 192), u)
	if err != nil {
		return err
	}
	if ins != nil {
		return ins.Insert(key, b)
	}
	return t.kv.Set(key, b)
}

func (t *btx) Usage(ws, after string, fn func(*UsageRecord) (bool, error)) error {
	prefix := pUsage + ws + "/"
	start := prefix + after
	return t.kv.Iterate(kvRange{Prefix: prefix, Start: start}, func(k, v []byte) (bool, error) {
		if after != "" && string(k) == start {
			return true, nil
		}
		u := new(UsageRecord)
		if err := decodeUsage(v, u); err != nil {
			return false, fmt.Errorf("usage record %s: %w", k, err)
		}
		u.Workspace, u.ID = ws, string(k[len(prefix):])
		return fn(u)
	})
}

func (t *btx) Meta(name string) ([]byte, error) { return t.value(pMeta + name) }

func (t *btx) PutMeta(name string, value []byte) error {
	return t.kv.Set(pMeta+name, append([]byte(nil), value...))
}
