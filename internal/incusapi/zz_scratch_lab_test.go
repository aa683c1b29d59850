package incusapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
)

func TestLabScratchStall(t *testing.T) {
	c := labClient(t)
	node := labtest.Nodes(t)[0]
	c = c.WithProject(node.Project)
	ctx := context.Background()
	n, _ := strconv.Atoi(os.Getenv("ROUNDS"))
	if n == 0 {
		n = 50
	}
	handshakeTimeout = 5 * time.Second
	var worst time.Duration
	var all []time.Duration
	for round := range n {
		w := where{op: "scratch", instance: node.Instance}
		recDone := make(chan struct{})
		go func() {
			defer close(recDone)
			if os.Getenv("REC") != "" {
				_, _ = c.Exec(ctx, node.Instance, ExecRequest{Command: []string{"systemctl", "is-system-running"}})
			}
		}()
		t0 := time.Now()
		r, err := c.do(ctx, w, http.MethodPost, instPath(node.Instance, "exec"), nil, execBody{Command: []string{"sh", "-c", "cat"}, WaitForWebsocket: true})
		if err != nil {
			t.Fatal(err)
		}
		op, _ := c.asyncOp(w, r)
		var fds map[string]string
		_ = json.Unmarshal(op.Metadata["fds"], &fds)
		tPost := time.Since(t0)
		var wg sync.WaitGroup
		names := []string{"control", "0", "1", "2"}
		wss := make([]*Websocket, 4)
		errs := make([]error, 4)
		took := make([]time.Duration, 4)
		for i, name := range names {
			wg.Go(func() {
				s := time.Now()
				wss[i], errs[i] = c.dialWebsocket(ctx, w, "/1.0/operations/"+url.PathEscape(op.ID)+"/websocket", url.Values{"secret": {fds[name]}})
				took[i] = time.Since(s)
			})
		}
		wg.Wait()
		total := time.Since(t0)
		all = append(all, total)
		if total > worst {
			worst = total
		}
		if total > time.Second || errs[0] != nil || errs[1] != nil || errs[2] != nil || errs[3] != nil {
			t.Logf("round %d op %s: post %s dials %v errs %v", round, op.ID, tPost, took, errs)
		}
		go func() {
			if wss[3] != nil {
				_, _ = io.ReadAll(&streamReader{ws: wss[3]})
			}
		}()
		<-recDone
		if wss[1] != nil {
			_ = wss[1].WriteMessage(OpBinary, []byte("x"))
			_ = wss[1].WriteMessage(OpText, nil)
		}
		if wss[2] != nil {
			_, _ = io.ReadAll(&streamReader{ws: wss[2]})
		}
		_, _ = c.waitOp(ctx, w, op.ID, 10*time.Second)
		for _, ws := range wss {
			if ws != nil {
				_ = ws.Close()
			}
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	fmt.Printf("rounds %d median %s p99 %s worst %s\n", n, all[n/2], all[n*99/100], worst)
}
