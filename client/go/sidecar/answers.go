package sidecar

import (
	"sync"

	pb "github.com/cleveragents/cleveragents-sidecar/client/go/toolruntimev1"
)

// answersKept bounds the answers a session remembers (the oldest go first): a re-attached
// stream asks again only for what is still owed, a handful at most.
const answersKept = 1024

// answers are what a session sent, by invocation ("tool:", "llm:" or "approval:" and the id),
// and the work under way: an invocation a re-attached stream sends again is answered again
// with the same answer, and work under way is not started twice. Each answer remembers the
// stream it went out on (its attach number), so that it is sent once on each stream at most:
// a second answer to one call on one stream is a protocol error to the sidecar.
type answers struct {
	mu      sync.Mutex
	sent    map[string]sentAnswer
	order   []string // the keys of sent, oldest first
	working map[string]bool
}

type sentAnswer struct {
	message *pb.SessionRequest
	attach  int
}

func newAnswers() *answers {
	return &answers{sent: map[string]sentAnswer{}, working: map[string]bool{}}
}

// begin says whether the work for key should start now (it is neither under way nor done).
// A key answered already is sent again through send (which returns the stream it went out
// on) if it went out on an earlier stream than attach, the one asking again.
func (a *answers) begin(key string, attach int, send func(*pb.SessionRequest) int) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.working[key] {
		return false
	}
	if answer, ok := a.sent[key]; ok {
		if answer.attach < attach {
			a.sent[key] = sentAnswer{answer.message, send(answer.message)}
		}
		return false
	}
	a.working[key] = true
	return true
}

// finish records key's answer and sends it (nil: abandoned, nothing to send) through send,
// which returns the stream it went out on; under the lock, so that an invocation sent again
// meanwhile finds it either under way or answered on that stream.
func (a *answers) finish(key string, message *pb.SessionRequest, send func(*pb.SessionRequest) int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.working, key)
	if message == nil {
		return
	}
	a.sent[key] = sentAnswer{message, send(message)}
	a.order = append(a.order, key)
	if len(a.order) > answersKept {
		delete(a.sent, a.order[0])
		a.order = a.order[1:]
	}
}
