package sidecar

import (
	pb "github.com/cleveragents/cleveragents-sidecar/client/go/toolruntimev1"
	"google.golang.org/protobuf/proto"
)

// deltasKept bounds the LLM calls whose deltas a deltaDedup remembers: a stream resends only
// the current call's.
const deltasKept = 4

// deltaDedup hands out each piece of the model's answer once across reconnections. After a
// reconnection the sidecar sends the current call's deltas again from index 0, joined (Index
// and Count say which of the call's deltas a message holds); deltaDedup remembers, per call,
// the next delta index and how many bytes of text and of each tool call's arguments were
// handed out, and trims a resent piece to what is new. It is the Node.js client's DeltaDedup.
type deltaDedup struct {
	calls map[int32]*deltaCall
	order []int32 // the iterations in calls, oldest first
}

// deltaCall is one LLM call's deltas: those handed out, and those the current connection
// brought (nil until its first).
type deltaCall struct {
	next     uint32
	text     int
	args     map[int32]int
	received *deltaCounts
}

type deltaCounts struct {
	text int
	args map[int32]int
}

func newDeltaDedup() *deltaDedup {
	return &deltaDedup{calls: map[int32]*deltaCall{}}
}

// connected marks a new connection: its deltas are counted afresh.
func (d *deltaDedup) connected() {
	for _, call := range d.calls {
		call.received = nil
	}
}

// admit returns the part of ev (an llm_delta event) not handed out yet, or nil if nothing of
// it is new. ev itself is not changed.
func (d *deltaDedup) admit(ev *pb.RunEvent) *pb.RunEvent {
	delta := ev.GetLlmDelta()
	call := d.calls[delta.GetIteration()]
	if call == nil {
		call = &deltaCall{args: map[int32]int{}}
		d.calls[delta.GetIteration()] = call
		d.order = append(d.order, delta.GetIteration())
		if len(d.order) > deltasKept {
			delete(d.calls, d.order[0])
			d.order = d.order[1:]
		}
	}
	if call.received == nil {
		// The call's first piece on this connection: from index 0 (a catch-up), or on from
		// where the last connection stopped.
		if delta.GetIndex() == 0 {
			call.received = &deltaCounts{args: map[int32]int{}}
		} else {
			call.received = &deltaCounts{text: call.text, args: copyCounts(call.args)}
		}
	}
	count := delta.GetCount()
	if count == 0 {
		count = 1
	}
	end := delta.GetIndex() + count
	tool, isTool := int32(0), delta.ToolCallIndex != nil
	var seen, at int
	var piece string
	if isTool {
		tool = delta.GetToolCallIndex()
		seen, at, piece = call.args[tool], call.received.args[tool], delta.GetArguments()
		call.received.args[tool] = at + len(piece)
	} else {
		seen, at, piece = call.text, call.received.text, delta.GetText()
		call.received.text = at + len(piece)
	}
	if end <= call.next {
		return nil // all of it handed out already
	}
	skip := seen - at
	if skip < 0 {
		skip = 0
	}
	if skip > len(piece) {
		skip = len(piece)
	}
	fresh := piece[skip:]
	trimmed := proto.Clone(ev).(*pb.RunEvent)
	out := trimmed.GetLlmDelta()
	from := delta.GetIndex()
	if from < call.next {
		from = call.next
	}
	out.Index, out.Count = from, end-from
	if isTool {
		out.Arguments = fresh
		if _, had := call.args[tool]; had && delta.GetIndex() < call.next {
			out.ToolCallId, out.ToolName = "", "" // the call's first delta, with them, went out
		}
		call.args[tool] = seen + len(fresh)
	} else {
		out.Text = fresh
		call.text = seen + len(fresh)
	}
	call.next = end
	return trimmed
}

func copyCounts(counts map[int32]int) map[int32]int {
	out := make(map[int32]int, len(counts))
	for k, v := range counts {
		out[k] = v
	}
	return out
}
