package cyclic

import "context"

type run struct{ ctx context.Context }

type step struct {
	name string
	body func() error
}

func (r *run) steps() []step {
	return []step{{"first", r.first}, {"second", r.second}}
}
