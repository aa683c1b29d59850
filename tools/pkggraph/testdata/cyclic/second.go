package cyclic

func (r *run) second() error { return r.first() }

func (r *run) helper() error { return nil }
