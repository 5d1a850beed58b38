package uploader

import "sync"

// queue is the pool's FIFO of parts waiting for a worker: one entry per
// part an object has ready. An entry names only its object; the worker
// that takes it takes the object's oldest ready part (Upload.claim), so
// an object can re-cut its ready parts (its tail, at Close) while they
// wait, and add or withdraw entries to match. Each entry is a pointer:
// the queue holds at most one per ready part, and every ready part's
// bytes are in the pool's buffers already. Safe for concurrent use.
type queue struct {
	mu     sync.Mutex
	cond   sync.Cond
	items  []*Upload // items[head:] wait, oldest first
	head   int
	closed bool
}

func newQueue() *queue {
	q := &queue{}
	q.cond.L = &q.mu
	return q
}

// push adds n entries for o at the back. It fails (false, nothing added)
// once the queue is closed.
func (q *queue) push(o *Upload, n int) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return false
	}
	for range n {
		q.items = append(q.items, o)
	}
	if n == 1 {
		q.cond.Signal()
	} else {
		q.cond.Broadcast()
	}
	return true
}

// pop takes the oldest entry, waiting for one; false once the queue is
// closed and empty.
func (q *queue) pop() (*Upload, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.head == len(q.items) && !q.closed {
		q.cond.Wait()
	}
	if q.head == len(q.items) {
		return nil, false
	}
	o := q.items[q.head]
	q.items[q.head] = nil
	q.head++
	if q.head == len(q.items) {
		q.items, q.head = q.items[:0], 0
	} else if q.head > 64 && q.head > len(q.items)/2 {
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items, q.head = q.items[:n], 0
	}
	return o, true
}

// withdraw removes up to n of o's entries, the newest first, and returns
// how many it removed.
func (q *queue) withdraw(o *Upload, n int) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	removed := 0
	for i := len(q.items) - 1; i >= q.head && removed < n; i-- {
		if q.items[i] == o {
			q.items = append(q.items[:i], q.items[i+1:]...)
			removed++
		}
	}
	clear(q.items[len(q.items) : len(q.items)+removed])
	return removed
}

// others counts the entries of objects other than o: parts that workers
// take before any o adds now.
func (q *queue) others(o *Upload) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	for _, x := range q.items[q.head:] {
		if x != o {
			n++
		}
	}
	return n
}

// close wakes every waiting worker; pop drains what is left, then fails.
func (q *queue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.cond.Broadcast()
}
