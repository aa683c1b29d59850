package incus

// BenchmarkLabCommand times one short command (`systemctl is-system-running`) on a lab
// node through the exec session and with a recorded exec, the two ways the transport
// runs commands. Run with
//
//	FEDIVERSITY_LAB=1 go test ./internal/transport/incus -run '^$' -bench LabCommand -benchtime 50x

import (
	"context"
	"testing"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
)

func BenchmarkLabCommand(b *testing.B) {
	labtest.Require(b)
	node := labtest.Nodes(b)[0]
	for _, mode := range []struct {
		name     string
		recorded bool
	}{{"session", false}, {"recorded", true}} {
		b.Run(mode.name, func(b *testing.B) {
			tr, err := New(Config{Client: mustClient(b), Instance: node.Instance, Project: node.Project, Node: node.Name, RecordedExecOnly: mode.recorded})
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = tr.Close() }()
			ctx := context.Background()
			argv := []string{"systemctl", "is-system-running"}
			if _, err := tr.Run(ctx, argv, deploybody.RunOptions{}); err != nil { // opens the session
				b.Fatal(err)
			}
			b.ResetTimer()
			for range b.N {
				if _, err := tr.Run(ctx, argv, deploybody.RunOptions{}); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if !mode.recorded && tr.viaRecorded.Load() != 0 {
				b.Fatalf("%d commands left the session", tr.viaRecorded.Load())
			}
		})
	}
}
