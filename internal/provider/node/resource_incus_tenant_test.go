package node

import (
	"reflect"
	"testing"
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
