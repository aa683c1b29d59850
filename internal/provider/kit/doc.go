// Package kit is what the provider's families (internal/provider/node, k8s, spire,
// submission) share: Config, the per-run values and the clients the provider builds once
// in Configure; the one form of a diagnostic; the plan-time validators; the `timings`
// blocks; the `ssh` and `incus` transport blocks and how they open a transport; the
// per-run and submission checks. It imports no family and not the provider's root, so
// the families never import each other.
//
// The one refresh convention. Every resource reads what it manages in one method,
//
//	func (r *xResource) refresh(ctx context.Context, m *xModel, …) (diags diag.Diagnostics, gone error)
//
// which fills m from what the object is now (or, given a run's result, from that
// result). gone is non-nil when the object no longer exists; m is then left alone and
// the caller decides: Read removes the resource from state, Create and Update fail. A
// warning in diags leaves m as it was ("the state is kept as it was"). refresh never
// writes the state: Read (and Create, Update and import where they re-read) appends
// diags and ends with resp.State.Set(ctx, m).
package kit
