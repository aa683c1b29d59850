package cyclic

func (r *run) first() error { return r.helper() }
