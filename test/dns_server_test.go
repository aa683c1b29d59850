package test

// A real DNS server for the DNS lane's records: Debian's knot (lab/install-host.sh), run
// by the test on a port of its own on 127.0.0.1, serving a zone the test writes from the
// module's `domain` and `dns_records` outputs. The records are loaded from a zone file,
// not through a DNS provider: no DNS provider can be installed here (the providers'
// registries cannot be reached), and a zone file holds exactly what such a provider
// would create, one resource record per entry of `dns_records`.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
)

// dnsRecord is one entry of a group module's dns_records output.
type dnsRecord struct{ node, name, typ, value string }

// dnsServer is a knotd serving one zone on 127.0.0.1.
type dnsServer struct {
	t      *testing.T
	dir    string
	addr   string
	domain string
	serial int
	cmd    *exec.Cmd
}

// startDNSServer starts knotd for domain on a free port of 127.0.0.1; the test's end
// stops it.
func startDNSServer(t *testing.T, domain string) *dnsServer {
	t.Helper()
	knotd, err := exec.LookPath("knotd")
	if err != nil {
		labtest.Require(t)
		t.Fatalf("knotd is not installed (run lab/install-host.sh): %v", err)
	}
	l, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.LocalAddr().String()
	_ = l.Close()
	s := &dnsServer{t: t, dir: t.TempDir(), addr: addr, domain: domain}
	host, port, _ := net.SplitHostPort(addr)
	conf := fmt.Sprintf(`server:
    listen: %s@%s
    rundir: %s
database:
    storage: %s
template:
  - id: default
    storage: %s
    zonefile-sync: -1
zone:
  - domain: %s
    file: zone
log:
  - target: stderr
    any: warning
`, host, port, s.dir, s.dir, s.dir, domain)
	if err := os.WriteFile(filepath.Join(s.dir, "knot.conf"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	s.writeZone(nil)
	s.cmd = exec.Command(knotd, "-c", filepath.Join(s.dir, "knot.conf"))
	s.cmd.Stdout, s.cmd.Stderr = os.Stderr, os.Stderr
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.cmd.Process.Kill(); _ = s.cmd.Wait() })
	return s
}

// writeZone writes the zone: its SOA (whose serial grows with each write) and NS, and
// one record per entry.
func (s *dnsServer) writeZone(records []dnsRecord) {
	s.t.Helper()
	s.serial++
	var b strings.Builder
	fmt.Fprintf(&b, "$ORIGIN %s.\n$TTL 60\n@ SOA ns hostmaster %d 3600 900 604800 60\n@ NS ns\nns A 127.0.0.1\n", s.domain, s.serial)
	for _, r := range records {
		fmt.Fprintf(&b, "%s. %s %s\n", r.name, r.typ, r.value)
	}
	if err := os.WriteFile(filepath.Join(s.dir, "zone"), []byte(b.String()), 0o600); err != nil {
		s.t.Fatal(err)
	}
}

// load serves records (the zone is written and reloaded), then checks that each
// resolves as written and that each name in gone has no address.
func (s *dnsServer) load(records []dnsRecord, gone ...string) error {
	s.writeZone(records)
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, s.addr)
	}}
	deadline := time.Now().Add(20 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		// knotc asks the running server, over its control socket in rundir, to read the
		// zone file again (refused until the server is up).
		out, err := exec.Command("knotc", "-c", filepath.Join(s.dir, "knot.conf"), "zone-reload", s.domain).CombinedOutput()
		if err != nil {
			last = fmt.Errorf("knotc zone-reload: %v: %s", err, out)
		} else if last = s.check(r, records, gone); last == nil {
			return nil
		}
		time.Sleep(300 * time.Millisecond)
	}
	return fmt.Errorf("the DNS server on %s: %w", s.addr, last)
}

func (s *dnsServer) check(r *net.Resolver, records []dnsRecord, gone []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	want := map[string][]string{} // "name type" -> values
	for _, rec := range records {
		want[rec.name+" "+rec.typ] = append(want[rec.name+" "+rec.typ], rec.value)
	}
	for key, values := range want {
		name, typ, _ := strings.Cut(key, " ")
		family := map[string]string{"A": "ip4", "AAAA": "ip6"}[typ]
		ips, err := r.LookupIP(ctx, family, name)
		if err != nil {
			return fmt.Errorf("%s %s: %w", name, typ, err)
		}
		var got []string
		for _, ip := range ips {
			got = append(got, ip.String())
		}
		slices.Sort(got)
		slices.Sort(values)
		if !slices.Equal(got, values) {
			return fmt.Errorf("%s %s resolves to %v, want %v", name, typ, got, values)
		}
	}
	for _, name := range gone {
		ips, err := r.LookupIP(ctx, "ip", name)
		var dnsErr *net.DNSError
		if err == nil || !errors.As(err, &dnsErr) || !dnsErr.IsNotFound {
			return fmt.Errorf("%s should have no record, resolves to %v (%v)", name, ips, err)
		}
	}
	return nil
}

// dnsRecordsOf reads the root output `dns_records` of a state's outputs.
func dnsRecordsOf(value any) ([]dnsRecord, error) {
	list, ok := value.([]any)
	if !ok {
		return nil, fmt.Errorf("dns_records is %T, want a list", value)
	}
	var out []dnsRecord
	for _, v := range list {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("a dns_records entry is %T", v)
		}
		out = append(out, dnsRecord{node: fmt.Sprint(m["node"]), name: fmt.Sprint(m["name"]), typ: fmt.Sprint(m["type"]), value: fmt.Sprint(m["value"])})
	}
	return out, nil
}
