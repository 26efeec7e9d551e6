package formats

import "github.com/tidwall/gjson"

// The usage object of a non-stream answer is read member by member as it
// passes (a counts node), not kept and parsed again at its end: each
// member of a format's counts table sets its slot, and the format's done
// takes the slots when the object ends. The table reads what the
// format's usage reader (chatUsage, responsesUsage, anthropicUsage,
// googleUsage: a ForEach over the object whose switch sets each count)
// reads from the same object; the body oracle holds them to it.

// counts are the slots of the usage object being read.
type counts struct {
	v   [maxCounts]int64
	has uint8 // bit i: slot i was set
}

const maxCounts = 8

func (c *counts) set(slot int, v int64) {
	c.v[slot] = v
	c.has |= 1 << slot
}

// got reports whether slot was set.
func (c *counts) got(slot int) bool { return c.has&(1<<slot) != 0 }

// countMember is a member of a usage object that sets a slot: its value's
// count (num), the last such member's counting; or, with inner, the count
// of the first member named inner of each such member's object (Get).
type countMember struct {
	key  string
	slot int
	// inner names the count inside an object member.
	inner string
	// zero sets the slot to 0 for each member named key before its inner
	// count is read (a reader that takes num(val.Get(inner)), 0 when the
	// member has no inner count); otherwise a member without one leaves
	// the slot as it was.
	zero bool
	// numbers counts only number values; a member of another type is as
	// if absent.
	numbers bool
}

// countsNode returns the node of a usage object read by its table: the
// slots are cleared as the object begins (whatever value it is) and done
// is given them when it ends as an object.
func countsNode(done func(m *Meter, c *counts), table ...countMember) *bodyNode {
	n := &bodyNode{start: func(m *Meter) { m.counts = counts{} }, end: func(m *Meter) { done(m, &m.counts) }}
	for _, cm := range table {
		if cm.slot < 0 || cm.slot >= maxCounts {
			panic("formats: count slot out of range: " + cm.key)
		}
		read := countRead(cm.slot, cm.numbers)
		if cm.inner == "" {
			n.fields = append(n.fields, bodyField{key: cm.key, all: true, node: read})
			continue
		}
		inner := &bodyNode{fields: []bodyField{{key: cm.inner, node: read}}}
		if cm.zero {
			slot := cm.slot
			inner.start = func(m *Meter) { m.counts.set(slot, 0) }
		}
		n.fields = append(n.fields, bodyField{key: cm.key, all: true, node: inner})
	}
	return n
}

// countRead is the node of one count: num of the value, any value unless
// numbers.
func countRead(slot int, numbers bool) *bodyNode {
	return &bodyNode{read: func(m *Meter, v gjson.Result) {
		if numbers && v.Type != gjson.Number {
			return
		}
		m.counts.set(slot, num(v))
	}}
}
