package deploybody

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestReadClosureUnits(t *testing.T) {
	root := t.TempDir()
	writeClosure(t, root, testToplevel, closureSpec{
		units: map[string]string{
			"nginx.service":    plainService,
			"getty@.service":   plainService,
			"bad name.service": plainService,
			"README":           "not a unit",
		},
		wants: map[string][]string{"multi-user.target": {"nginx.service"}, "getty.target": {"getty@tty1.service"}},
	})
	unitDirOnDisk := filepath.Join(root, testEtcOutput, "etc/systemd/system")
	must(t, os.Symlink("/dev/null", filepath.Join(unitDirOnDisk, "masked.service")))                // a symlink entry is owned too
	must(t, os.MkdirAll(filepath.Join(unitDirOnDisk, "nginx.service.d"), 0o755))                    // drop-in dir
	must(t, os.Symlink("/nix/store/x-unit/foo.socket", filepath.Join(unitDirOnDisk, "foo.socket"))) // dangling store symlink

	c, err := readClosureUnits(localTree{root: root}, testToplevel)
	if err != nil {
		t.Fatal(err)
	}
	if got := sortedKeys(c.owned); !reflect.DeepEqual(got, []string{"foo.socket", "getty@.service", "masked.service", "nginx.service"}) {
		t.Fatalf("owned = %v", got)
	}
	if got := sortedKeys(c.wanted); !reflect.DeepEqual(got, []string{"getty@tty1.service", "nginx.service"}) {
		t.Fatalf("wanted = %v", got)
	}
	if !reflect.DeepEqual(c.rejected, []string{"README", "bad name.service"}) {
		t.Fatalf("rejected = %v", c.rejected)
	}
	if !c.owns("getty@tty7.service") || c.owns("other.service") || !c.wants("getty@tty1.service") || c.wants("getty@tty2.service") {
		t.Fatal("owns/wants of instances wrong")
	}
	if got := c.concreteUnits(); !reflect.DeepEqual(got, []string{"foo.socket", "getty@tty1.service", "masked.service", "nginx.service"}) {
		t.Fatalf("concrete = %v", got)
	}
	if _, err := readClosureUnits(localTree{root: root}, "/nix/store/0000000000000000000000000000000f-missing"); err == nil || !strings.Contains(err.Error(), "etc/systemd/system") {
		t.Fatalf("missing closure: err = %v", err)
	}
}

func TestLocalTreeResolvesAbsoluteSymlinksInsideRoot(t *testing.T) {
	root := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(root, "nix/store/b/real"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "nix/store/b/real/file"), []byte("inside"), 0o644))
	must(t, os.MkdirAll(filepath.Join(root, "nix/store/a"), 0o755))
	must(t, os.Symlink("/nix/store/b/real", filepath.Join(root, "nix/store/a/link")))
	must(t, os.Symlink("../b/real/file", filepath.Join(root, "nix/store/a/rel")))
	must(t, os.Symlink("/nix/store/a/loop", filepath.Join(root, "nix/store/a/loop")))
	lt := localTree{root: root}
	for _, p := range []string{"/nix/store/a/link/file", "/nix/store/a/rel"} {
		data, err := lt.readFile(p)
		if err != nil || string(data) != "inside" {
			t.Fatalf("%s: %q %v", p, data, err)
		}
	}
	if _, err := lt.resolve("/nix/store/a/loop/x"); err == nil {
		t.Fatal("a symlink loop must be an error")
	}
	if p, _ := (localTree{}).resolve("/nix/store/a"); p != "/nix/store/a" {
		t.Fatalf("empty root must be identity, got %s", p)
	}
}

func TestUnitFileLoopBudget(t *testing.T) {
	root := t.TempDir()
	writeClosure(t, root, testToplevel, closureSpec{units: map[string]string{
		"a.service":      "[Unit]\nX-LoopBudget=3\n[Service]\nExecStart=/bin/x\n",
		"b.service":      "[Service]\n# X-LoopBudget=9\nX-LoopBudget = 4\n",
		"c.service":      "[Install]\nX-LoopBudget=7\n",
		"d.service":      "[Service]\nX-LoopBudget=lots\n",
		"tmpl@.service":  "[Service]\nX-LoopBudget=2\n",
		"plain.service":  plainService,
		"dropin.service": "[Service]\nX-LoopBudget=1\n",
	}})
	dropDir := filepath.Join(root, testEtcOutput, "etc/systemd/system/dropin.service.d")
	must(t, os.MkdirAll(dropDir, 0o755))
	must(t, os.WriteFile(filepath.Join(dropDir, "override.conf"), []byte("[Service]\nX-LoopBudget=8\n"), 0o644))
	lt := localTree{root: root}
	cases := []struct {
		unit    string
		budget  int
		found   bool
		wantErr bool
	}{
		{"a.service", 3, true, false},
		{"b.service", 4, true, false},
		{"c.service", 0, false, false}, // [Install] does not count
		{"d.service", 0, false, true},
		{"tmpl@x.service", 2, true, false},
		{"plain.service", 0, false, false},
		{"dropin.service", 8, true, false}, // drop-in wins
		{"absent.service", 0, false, false},
	}
	for _, tc := range cases {
		b, found, err := unitFileLoopBudget(lt, testToplevel, tc.unit)
		if b != tc.budget || found != tc.found || (err != nil) != tc.wantErr {
			t.Errorf("%s: budget %d found %v err %v", tc.unit, b, found, err)
		}
	}
}

func TestReadLinkRequirements(t *testing.T) {
	root := t.TempDir()
	writeClosure(t, root, testToplevel, closureSpec{linkFiles: map[string]string{
		"10-lan.link":   "[Match]\nPermanentMACAddress=00-16-3E-AA-BB-CC 00:16:3e:aa:bb:cd\n[Link]\nName=lan\n",
		"20-wan.link":   "[Link]\nPermanentMACAddress=00:11:22:33:44:55\n", // not in [Match]
		"30-reset.link": "[Match]\nPermanentMACAddress=00:11:22:33:44:55\nPermanentMACAddress=\n",
		"notes.txt":     "[Match]\nPermanentMACAddress=00:11:22:33:44:55\n",
	}})
	reqs, err := readLinkRequirements(localTree{root: root}, testToplevel)
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 1 || !strings.HasSuffix(reqs[0].File, "/etc/systemd/network/10-lan.link") ||
		!reflect.DeepEqual(reqs[0].MACs, []string{"00:16:3e:aa:bb:cc", "00:16:3e:aa:bb:cd"}) {
		t.Fatalf("requirements = %+v", reqs)
	}
	empty := t.TempDir()
	writeClosure(t, empty, testToplevel, closureSpec{})
	if reqs, err := readLinkRequirements(localTree{root: empty}, testToplevel); err != nil || reqs != nil {
		t.Fatalf("closure without network dir: %v %v", reqs, err)
	}
}

func TestNormalizeMAC(t *testing.T) {
	for in, want := range map[string]string{"00:16:3E:aa:bb:cc": "00:16:3e:aa:bb:cc", "00-16-3e-aa-bb-cc": "00:16:3e:aa:bb:cc"} {
		if got, ok := normalizeMAC(in); !ok || got != want {
			t.Errorf("%s → %s %v", in, got, ok)
		}
	}
	for _, bad := range []string{"", "00:16:3e:aa:bb", "00:16:3e:aa:bb:cc:dd", "zz:16:3e:aa:bb:cc", "0:16:3e:aa:bb:cc"} {
		if _, ok := normalizeMAC(bad); ok {
			t.Errorf("%q accepted", bad)
		}
	}
}
