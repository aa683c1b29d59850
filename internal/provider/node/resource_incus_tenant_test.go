package node

import (
	"reflect"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// TestKeptVolumes: of what a tenant's project holds, its custom volumes are the data
// volumes the destroy keeps the project for; its default profile goes with it, and
// anything else (an instance, an image, a volume of another kind) fails the destroy.
func TestKeptVolumes(t *testing.T) {
	vols, others := keptVolumes([]string{
		"/1.0/profiles/default?project=t1",
		"/1.0/storage-pools/lab/volumes/custom/web-data?project=t1",
		"/1.0/storage-pools/fast%20pool/volumes/custom/db-data?project=t1",
		"/1.0/instances/web?project=t1",
		"/1.0/storage-pools/lab/volumes/container/web?project=t1",
	})
	want := []poolVolume{
		{pool: "fast pool", volume: "db-data", url: "/1.0/storage-pools/fast%20pool/volumes/custom/db-data?project=t1"},
		{pool: "lab", volume: "web-data", url: "/1.0/storage-pools/lab/volumes/custom/web-data?project=t1"},
	}
	if !reflect.DeepEqual(vols, want) {
		t.Errorf("volumes %+v, want %+v", vols, want)
	}
	if wantOthers := []string{"/1.0/instances/web?project=t1", "/1.0/storage-pools/lab/volumes/container/web?project=t1"}; !reflect.DeepEqual(others, wantOthers) {
		t.Errorf("others %v, want %v", others, wantOthers)
	}
	if v, o := keptVolumes([]string{"/1.0/profiles/default?project=t1"}); len(v)+len(o) != 0 {
		t.Errorf("a project with only its default profile holds %v %v, want nothing", v, o)
	}
}

// TestTenantDeviceProblems: a device of the tenant's profile is refused at plan when it
// takes the name of the profile's own root disk or network device, has no type or one
// the profile does not take, or lacks what a container's device of its type needs.
func TestTenantDeviceProblems(t *testing.T) {
	opts := func(kv ...string) attr.Value {
		m := map[string]attr.Value{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = types.StringValue(kv[i+1])
		}
		return types.MapValueMust(types.StringType, m)
	}
	spire := opts("type", "proxy", "listen", "tcp:127.0.0.1:8081", "connect", "tcp:127.0.0.1:6591", "bind", "instance")
	for _, c := range []struct {
		name string
		opts attr.Value
		want string // a part of the one problem, or "" for none
	}{
		{"spire", spire, ""},
		{"root", spire, "the tenant profile's own device"},
		{"eth0", spire, "the tenant profile's own device"},
		{"spire", opts("listen", "tcp:127.0.0.1:8081", "connect", "tcp:127.0.0.1:6591"), "needs its `type`"},
		{"gpu", opts("type", "gpu"), `type "gpu"`},
		{"spire", opts("type", "proxy", "listen", "tcp:127.0.0.1:8081"), "a proxy needs `connect`"},
		{"data", opts("type", "disk", "path", "srv", "source", "/srv"), "must be absolute"},
	} {
		got := tenantDeviceProblems(c.name, c.opts)
		switch {
		case c.want == "" && len(got) > 0:
			t.Errorf("device %s: unexpected problems %q", c.name, got)
		case c.want != "" && (len(got) != 1 || !strings.Contains(got[0], c.want)):
			t.Errorf("device %s: problems %q, want one naming %q", c.name, got, c.want)
		}
	}
}
