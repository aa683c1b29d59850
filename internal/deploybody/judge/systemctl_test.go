package judge

import (
	"reflect"
	"strings"
	"testing"
)

// realShowOutput is `systemctl show -p … nginx.service foo@bar.service nope.service`
// as systemd 255 prints it: its own property order, blank lines between units, a
// not-found unit still gets a block, non-service units lack the Exec* properties.
const realShowOutput = `Result=success
NRestarts=0
ExecMainStartTimestampMonotonic=5123456
ExecMainCode=0
ExecMainStatus=0
Id=nginx.service
LoadState=loaded
ActiveState=active
SubState=running
FragmentPath=/etc/systemd/system/nginx.service
InvocationID=4c0e6b9a0b3e4bd0a8f1c2d3e4f5a6b7
ConditionResult=yes
ConditionTimestampMonotonic=5000001

Result=exit-code
NRestarts=3
ExecMainStartTimestampMonotonic=9999999
ExecMainCode=1
ExecMainStatus=203
Id=foo@bar.service
LoadState=loaded
ActiveState=activating
SubState=auto-restart
FragmentPath=/etc/systemd/system/foo@.service
InvocationID=
ConditionResult=yes
ConditionTimestampMonotonic=9000000

Id=nope.service
LoadState=not-found
ActiveState=inactive
SubState=dead
FragmentPath=
ConditionResult=no
ConditionTimestampMonotonic=0

Id=multi-user.target
LoadState=loaded
ActiveState=active
SubState=active
Result=success
`

func TestParseShow(t *testing.T) {
	units, rejected, err := ParseShow(realShowOutput)
	if err != nil || len(rejected) != 0 {
		t.Fatalf("err=%v rejected=%v", err, rejected)
	}
	want := []UnitState{
		{ID: "nginx.service", LoadState: "loaded", ActiveState: "active", SubState: "running", Result: "success",
			ExecMainStartMono: 5123456, ConditionResult: "yes", ConditionTimestampMono: 5000001,
			InvocationID: "4c0e6b9a0b3e4bd0a8f1c2d3e4f5a6b7", FragmentPath: "/etc/systemd/system/nginx.service"},
		{ID: "foo@bar.service", LoadState: "loaded", ActiveState: "activating", SubState: "auto-restart", Result: "exit-code",
			NRestarts: 3, ExecMainCode: 1, ExecMainStatus: 203, ExecMainStartMono: 9999999, ConditionResult: "yes",
			ConditionTimestampMono: 9000000, FragmentPath: "/etc/systemd/system/foo@.service"},
		{ID: "nope.service", LoadState: "not-found", ActiveState: "inactive", SubState: "dead", ConditionResult: "no"},
		{ID: "multi-user.target", LoadState: "loaded", ActiveState: "active", SubState: "active", Result: "success"},
	}
	if !reflect.DeepEqual(units, want) {
		t.Fatalf("ParseShow =\n%+v\nwant\n%+v", units, want)
	}
}

func TestParseShowEdges(t *testing.T) {
	cases := []struct {
		name         string
		in           string
		wantIDs      []string
		wantRejected []string
		wantErr      bool
	}{
		{"empty output", "", nil, nil, false},
		{"CRLF and multiple blank lines", "Id=a.service\r\nActiveState=active\r\n\r\n\r\nId=b.service\r\n", []string{"a.service", "b.service"}, nil, false},
		{"value with =", "Id=a.service\nFragmentPath=/x=y\n", []string{"a.service"}, nil, false},
		{"block without Id is rejected", "ActiveState=active\n", nil, []string{""}, false},
		{"invalid Id is rejected", "Id=$(reboot).service\n\nId=ok.service\n", []string{"ok.service"}, []string{"$(reboot).service"}, false},
		{"a line that is not Key=Value", "Id=a.service\nFailed to connect to bus\n", nil, nil, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			units, rejected, err := ParseShow(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v", err)
			}
			var ids []string
			for _, u := range units {
				ids = append(ids, u.ID)
			}
			if !reflect.DeepEqual(ids, tc.wantIDs) || !reflect.DeepEqual(rejected, tc.wantRejected) {
				t.Fatalf("ids=%q rejected=%q", ids, rejected)
			}
		})
	}
}

func TestParseListJobs(t *testing.T) {
	out := "1234 nginx.service start running\n1240 foo@bar.service start waiting\n\n1299 bad;name.service stop waiting\n"
	jobs, rejected, err := ParseListJobs(out)
	if err != nil {
		t.Fatal(err)
	}
	want := []Job{{1234, "nginx.service", "start", "running"}, {1240, "foo@bar.service", "start", "waiting"}}
	if !reflect.DeepEqual(jobs, want) || !reflect.DeepEqual(rejected, []string{"bad;name.service"}) {
		t.Fatalf("jobs=%+v rejected=%v", jobs, rejected)
	}
	if jobs, _, err := ParseListJobs("No jobs running.\n"); err != nil || len(jobs) != 0 {
		t.Fatalf("no jobs: %v %v", jobs, err)
	}
	for _, bad := range []string{"12 a.service start\n", "x a.service start running\n", "-1 a.service start running\n"} {
		if _, _, err := ParseListJobs(bad); err == nil {
			t.Errorf("%q parsed without error", bad)
		}
	}
}

func TestParseUnitList(t *testing.T) {
	out := "web.service loaded failed failed Web server\n● db.service loaded failed failed DB\n-.mount loaded failed failed Root\n`x`.service loaded failed failed evil\n"
	units, rejected := ParseUnitList(out)
	if !reflect.DeepEqual(units, []string{"web.service", "db.service", "-.mount"}) || !reflect.DeepEqual(rejected, []string{"`x`.service"}) {
		t.Fatalf("units=%v rejected=%v", units, rejected)
	}
}

func TestValidUnitName(t *testing.T) {
	valid := []string{"nginx.service", "getty@tty1.service", "getty@.service", "-.mount", "-.slice",
		"dev-disk-by\\x2duuid-1234.device", "systemd-fsck@dev-sda1.service", "a:b_c.d-e.timer"}
	invalid := []string{"", "nginx", "nginx.exe", "a b.service", "a;b.service", "$(x).service", "a/b.service",
		"--now.service\n", "a.service\nb.service", "`x`.service", "a'b.service", strings.Repeat("a", 250) + ".service"}
	for _, n := range valid {
		if !ValidUnitName(n) {
			t.Errorf("%q rejected", n)
		}
	}
	for _, n := range invalid {
		if ValidUnitName(n) {
			t.Errorf("%q accepted", n)
		}
	}
	if tmpl, ok := TemplateOf("getty@tty1.service"); !ok || tmpl != "getty@.service" {
		t.Errorf("TemplateOf = %q %v", tmpl, ok)
	}
	if _, ok := TemplateOf("getty@.service"); ok {
		t.Error("a template has no template")
	}
}

// Fuzz targets: the parsers read whatever a node prints, so they must never panic and
// must never let an invalid unit name through.

func FuzzParseShow(f *testing.F) {
	f.Add(realShowOutput)
	f.Add("")
	f.Add("Id=a.service\r\n\r\nId=b.service")
	f.Add("Id=$(x).service\nNRestarts=99999999999999999999\n")
	f.Add("=\n")
	f.Add("Id=a.service\nno equals sign\n")
	f.Fuzz(func(t *testing.T, in string) {
		units, _, err := ParseShow(in)
		if err != nil && units != nil {
			t.Fatal("units returned with an error")
		}
		for _, u := range units {
			if !ValidUnitName(u.ID) {
				t.Fatalf("invalid unit name %q passed", u.ID)
			}
			if u.NRestarts < 0 || u.ExecMainStatus < 0 || u.ExecMainCode < 0 {
				t.Fatalf("negative counter from %q: %+v", in, u)
			}
		}
		blocks, err := parseShowBlocks(in)
		if err == nil {
			for _, b := range blocks {
				if len(b) == 0 {
					t.Fatal("empty block")
				}
				for k := range b {
					if k == "" || strings.ContainsAny(k, " \t\n") {
						t.Fatalf("bad key %q", k)
					}
				}
			}
		}
	})
}

func FuzzParseListJobs(f *testing.F) {
	f.Add("1234 nginx.service start running\n1240 foo@bar.service start waiting\n")
	f.Add("No jobs running.\n")
	f.Add("")
	f.Add("1 a.service\n")
	f.Add("0 a.service start running\n")
	f.Add("99999999999999999999 a.service start running\n")
	f.Add("7 ;reboot;.service start running\n")
	f.Fuzz(func(t *testing.T, in string) {
		jobs, _, err := ParseListJobs(in)
		if err != nil && jobs != nil {
			t.Fatal("jobs returned with an error")
		}
		for _, j := range jobs {
			if j.ID <= 0 || !ValidUnitName(j.Unit) || j.Type == "" || j.State == "" {
				t.Fatalf("bad job %+v from %q", j, in)
			}
		}
	})
}

func FuzzParseUnitList(f *testing.F) {
	f.Add("web.service loaded failed failed Web\n● db.service loaded failed failed DB\n")
	f.Add("● \n")
	f.Fuzz(func(t *testing.T, in string) {
		units, _ := ParseUnitList(in)
		for _, u := range units {
			if !ValidUnitName(u) {
				t.Fatalf("invalid unit %q", u)
			}
		}
	})
}
