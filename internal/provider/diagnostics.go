package provider

// The one form of a failure in this provider's diagnostics (see STYLE.md): the summary is
// "Unable to <verb> <object>" or a precise fact ("Unit nginx.service failed on web01");
// the detail says which node or object, in which phase, the cause, and what the operator
// can do.

import "fmt"

// failureDetail writes a failure's detail: "<Subject>, phase <phase>: <cause>. <what to do>".
// subject names the node or object ("Node web01", "Namespace tenants").
func failureDetail(subject, phase string, cause error, whatToDo string) string {
	return fmt.Sprintf("%s, phase %s: %v. %s", subject, phase, cause, whatToDo)
}
