package k8s_test

// Faults of a k8s rollout on the lab control plane: an apply killed during its wait, a
// rollback the apiserver refuses, and an apiserver that stops answering during the wait.
// Each ends with the state, the Deployment and the verdict telling the truth.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/fediversity/terraform-provider-fediversity/internal/image"
	"github.com/fediversity/terraform-provider-fediversity/internal/k8s"
	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
)

// --- the provider as its own process, for a test that kills it ---

var providerBinary struct {
	once sync.Once
	dir  string
	err  error
}

// buildProvider builds the provider binary once per test process. A test that SIGKILLs
// the CLI must run the provider as the CLI's child process, as a user does: the
// in-process provider of terraform-plugin-testing would survive the kill.
func buildProvider(t *testing.T) string {
	t.Helper()
	providerBinary.once.Do(func() {
		dir, err := os.MkdirTemp("", "fediversity-provider-")
		if err != nil {
			providerBinary.err = err
			return
		}
		goBin := "go" // from PATH, as the other tests that build the provider
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, goBin, "build", "-o", filepath.Join(dir, "terraform-provider-fediversity"), ".")
		cmd.Dir = labtest.RepoRoot(t)
		if out, err := cmd.CombinedOutput(); err != nil {
			providerBinary.err = fmt.Errorf("go build of the provider: %v\n%s", err, out)
			return
		}
		providerBinary.dir = dir
	})
	if providerBinary.err != nil {
		t.Fatal(providerBinary.err)
	}
	return providerBinary.dir
}

// cliRun is one working directory with a configuration, run by the binary under test
// (TF_ACC_TERRAFORM_PATH) with the provider binary installed by dev_overrides.
type cliRun struct {
	t   *testing.T
	dir string
	env []string
}

func newCLIRun(t *testing.T) *cliRun {
	providerDir := buildProvider(t)
	dir := t.TempDir()
	rc := filepath.Join(dir, "cli.tfrc")
	addr := acctest.ProviderAddress()
	if err := os.WriteFile(rc, []byte(fmt.Sprintf("provider_installation {\n  dev_overrides {\n    %q = %q\n  }\n  direct {}\n}\n", addr, providerDir)), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"TF_CLI_CONFIG_FILE=" + rc, "CHECKPOINT_DISABLE=1", "TF_IN_AUTOMATION=1", "HOME=" + dir}
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k == "PATH" || k == "TMPDIR" {
			env = append(env, kv)
		}
	}
	return &cliRun{t: t, dir: dir, env: env}
}

func (r *cliRun) write(config string) {
	if err := os.WriteFile(filepath.Join(r.dir, "main.tf"), []byte(config), 0o600); err != nil {
		r.t.Fatal(err)
	}
}

func (r *cliRun) command(args ...string) (*exec.Cmd, *bytes.Buffer) {
	cmd := exec.Command(os.Getenv("TF_ACC_TERRAFORM_PATH"), args...)
	cmd.Dir, cmd.Env = r.dir, r.env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// Its own process group: the kill takes the CLI and the provider it started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd, &out
}

// run runs the binary to its end and returns its exit code and output.
func (r *cliRun) run(args ...string) (int, string) {
	cmd, out := r.command(args...)
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), out.String()
	}
	if err != nil {
		r.t.Fatalf("%v: %v", args, err)
	}
	return 0, out.String()
}

// providerProcesses are the live processes running the provider binary built here.
func providerProcesses(bin string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil {
			continue
		}
		if exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err == nil && strings.TrimSuffix(exe, " (deleted)") == bin {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestAccK8sRollout_killedApplyRollsBack: the apply is SIGKILLed during the wait of a
// bad rollout, and the next apply of the same configuration ends with the Deployment on
// the last good image.
//   - "cli-and-provider": the CLI and the provider it started are killed (a crash of the
//     machine, say). Nothing rolls back and the state keeps the good image; the next apply
//     finds the Deployment on the bad image, waits, and sets it back to the last good
//     template recorded on the Deployment.
//   - "cli": only the CLI is killed. The provider sees its call cancelled and rolls back
//     itself; the next apply tries the rollout again and rolls back again.
func TestAccK8sRollout_killedApplyRollsBack(t *testing.T) {
	for _, whole := range []bool{true, false} {
		name := "cli"
		if whole {
			name = "cli-and-provider"
		}
		t.Run(name, func(t *testing.T) { killedApply(t, whole) })
	}
}

func killedApply(t *testing.T, whole bool) {
	a := newK8sAcc(t)
	a.PullGrace = "8s" // the kill, 1s after the Deployment changed, lands well inside the wait
	r := newCLIRun(t)
	bin := filepath.Join(buildProvider(t), "terraform-provider-fediversity")

	r.write(a.Good("v1", "v1"))
	if code, out := r.run("apply", "-auto-approve", "-input=false", "-no-color"); code != 0 {
		t.Fatalf("first apply: exit %d\n%s", code, out)
	}
	goodRef, _, err := a.DeploymentImage()
	if err != nil {
		t.Fatal(err)
	}

	r.write(a.Faulty("broken"))
	cmd, out := r.command("apply", "-auto-approve", "-input=false", "-no-color")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		img, _, err := a.DeploymentImage()
		if err == nil && strings.Contains(img, "/web01-broken@") {
			break
		}
		if time.Now().After(deadline) {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Wait()
			t.Fatalf("the bad image never reached the Deployment (last %s, %v)\n%s", img, err, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second) // inside the wait: the pull grace is 8s
	target := cmd.Process.Pid
	if whole {
		target = -target // the process group: the CLI and the provider it started
	}
	if err := syscall.Kill(target, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if whole {
		for _, pid := range providerProcesses(bin) { // a provider outside the group: the crash takes it too
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(2 * time.Second)
		if img, _, _ := a.DeploymentImage(); !strings.Contains(img, "/web01-broken@") {
			t.Fatalf("after the kill the Deployment names %s: something rolled back although every process was killed", img)
		}
	} else {
		// The orphaned provider finishes its call (a rollback) and then has nothing to
		// serve: wait for the Deployment to settle, then end it.
		settle := time.Now().Add(45 * time.Second)
		for time.Now().Before(settle) {
			if img, _, _ := a.DeploymentImage(); img == goodRef {
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
		img, _, _ := a.DeploymentImage()
		t.Logf("after killing only the CLI, the Deployment names %s (good: %v)", img, img == goodRef)
		for _, pid := range providerProcesses(bin) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if d, err := a.C.CS.AppsV1().Deployments(a.Ns).Get(context.Background(), "web01", metav1.GetOptions{}); err != nil || !strings.Contains(d.Annotations[k8s.LastGoodAnnotation], goodRef) {
		t.Fatalf("the last good template is not recorded on the Deployment (err %v)", err)
	}

	code, text := r.run("apply", "-auto-approve", "-input=false", "-no-color")
	if code == 0 || !regexp.MustCompile(`(?s)ImagePullBackOff.*set\s+back\s+to\s+the\s+previous\s+image\s+`+regexp.QuoteMeta(goodRef)).MatchString(text) {
		t.Fatalf("the apply after the kill: exit %d, want a failure that rolled back to %s:\n%s", code, goodRef, text)
	}
	if img, _, _ := a.DeploymentImage(); img != goodRef {
		t.Fatalf("after the second apply the Deployment names %s, want %s", img, goodRef)
	}
	if _, err := a.ReadyPod(); err != nil {
		t.Fatal(err)
	}
	if code, text := r.run("plan", "-detailed-exitcode", "-input=false", "-no-color"); code != 2 || !strings.Contains(text, "fediversity_k8s_rollout.web01") {
		t.Fatalf("the plan after the rollback: exit %d, want 2 with the rollout to change:\n%s", code, text)
	}
	if code, text := r.run("destroy", "-auto-approve", "-input=false", "-no-color"); code != 0 {
		t.Fatalf("destroy: exit %d\n%s", code, text)
	}
}

// --- a rollback the apiserver refuses: a real ValidatingAdmissionPolicy ---

// refuseRollbacks makes the apiserver refuse, for real, every update of a Deployment in
// ns that names an image without "broken": the rollback of a broken rollout. It returns
// when the policy is in force (a server-side dry run is refused).
func (a *k8sAcc) refuseRollbacks(t *testing.T) (lift func()) {
	t.Helper()
	remove := a.AdmissionPolicy(acctest.Refusal{
		Name: "refuse-rollback-" + a.Ns, Op: admissionv1.Update, APIGroup: "apps", Resource: "deployments",
		Expression: `object.spec.template.spec.containers.all(c, c.image.contains("broken"))`,
		Message:    "test policy: this Deployment may only be moved to a broken image",
	})
	a.waitPolicy(t, true)
	return func() {
		remove()
		a.waitPolicy(t, false)
	}
}

// waitPolicy waits until a dry-run update of web01 to an image without "broken" is
// refused (inForce) or allowed. The probe must not be the Deployment's own template: the
// policy allows that while it names a broken image, and "lifted" would be seen too early.
func (a *k8sAcc) waitPolicy(t *testing.T, inForce bool) {
	t.Helper()
	deps := a.C.CS.AppsV1().Deployments(a.Ns)
	for i := 0; ; i++ {
		d, err := deps.Get(context.Background(), "web01", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		d.Spec.Template.Spec.Containers[0].Image = "127.0.0.1:1/policy-probe:v1"
		_, err = deps.Update(context.Background(), d, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		refused := apierrors.IsInvalid(err) || (err != nil && strings.Contains(err.Error(), "test policy"))
		if refused == inForce && (refused || err == nil || apierrors.IsConflict(err)) {
			return
		}
		if i > 150 {
			t.Fatalf("the admission policy is not in force=%v after 30s (last %v)", inForce, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestAccK8sRollout_refusedRollback: the apiserver refuses the rollback (a real
// ValidatingAdmissionPolicy); the apply fails saying so, the Deployment stays on the bad
// image, and the next apply, with the refusal lifted, rolls back to the last good image.
func TestAccK8sRollout_refusedRollback(t *testing.T) {
	a := newK8sAcc(t)
	var goodRef string
	var lift func()
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: a.Good("v1", "v1"),
				Check: func(s *terraform.State) error {
					goodRef = acctest.StateAttr(s, "fediversity_k8s_rollout.web01", "image_ref")
					lift = a.refuseRollbacks(t)
					return nil
				},
			},
			{
				Config:      a.Faulty("broken"),
				ExpectError: regexp.MustCompile(`(?s)ImagePullBackOff.*rollback\s+to\s+the\s+last\s+good\s+image.*FAILED.*test\s+policy`),
			},
			{
				PreConfig: func() {
					img, _, err := a.DeploymentImage()
					if err != nil || !strings.Contains(img, "/web01-broken@") {
						t.Fatalf("after the refused rollback the Deployment names %s (err %v), want the broken image", img, err)
					}
					lift()
				},
				Config:      a.Faulty("broken"),
				ExpectError: regexp.MustCompile(`(?s)ImagePullBackOff.*set\s+back\s+to\s+the\s+previous\s+image\s+` + regexp.QuoteMeta("127.0.0.1")),
			},
			{
				PreConfig: func() {
					img, _, err := a.DeploymentImage()
					if err != nil || img != goodRef {
						t.Fatalf("after the second apply the Deployment names %s (err %v), want %s", img, err, goodRef)
					}
					if _, err := a.ReadyPod(); err != nil {
						t.Fatal(err)
					}
				},
				Config:             a.Faulty("broken"),
				PlanOnly:           true,
				ExpectNonEmptyPlan: true,
			},
		},
	})
}

// --- an apiserver that stops answering: a loopback TCP proxy the test cuts ---

// cutProxy forwards TCP from a loopback port to the apiserver. Cut closes every open
// connection and refuses new ones until Restore; it counts the connections refused, so a
// test knows the provider tried to reach the apiserver while it was cut. The shared
// apiserver itself is never stopped.
type cutProxy struct {
	ln      net.Listener
	target  string
	mu      sync.Mutex
	cut     bool
	conns   map[net.Conn]struct{}
	refused atomic.Int64
}

func startCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	t.Cleanup(func() { _ = ln.Close(); p.Cut() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	return p
}

func (p *cutProxy) serve(c net.Conn) {
	p.mu.Lock()
	if p.cut {
		p.mu.Unlock()
		p.refused.Add(1)
		_ = c.Close()
		return
	}
	p.mu.Unlock()
	up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		_ = c.Close()
		return
	}
	p.mu.Lock()
	p.conns[c], p.conns[up] = struct{}{}, struct{}{}
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) { _, _ = io.Copy(dst, src); done <- struct{}{} }
	go pipe(up, c)
	go pipe(c, up)
	<-done
	_ = c.Close()
	_ = up.Close()
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, up)
	p.mu.Unlock()
}

func (p *cutProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		_ = c.Close()
	}
}

func (p *cutProxy) Restore() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

// proxiedKubeconfig writes a copy of the lab kubeconfig whose server is the proxy.
func proxiedKubeconfig(t *testing.T, kc string) (path string, p *cutProxy) {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(kc)
	if err != nil {
		t.Fatal(err)
	}
	var target string
	for _, cl := range cfg.Clusters {
		target = strings.TrimPrefix(cl.Server, "https://")
	}
	p = startCutProxy(t, target)
	for _, cl := range cfg.Clusters {
		cl.Server = "https://" + p.ln.Addr().String() // the serving certificate names 127.0.0.1
	}
	path = filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path, p
}

const holdFinalizer = "fediversity.test/hold"

// holdOldPod puts a finalizer on web01's current pod, so that a Recreate rollout cannot
// start the new pod until the test lets it go: the rollout is certainly in its wait
// while the test cuts the apiserver off.
func (a *k8sAcc) holdOldPod(t *testing.T) string {
	t.Helper()
	pod, err := a.ReadyPod()
	if err != nil {
		t.Fatal(err)
	}
	patch := fmt.Sprintf(`{"metadata":{"finalizers":[%q]}}`, holdFinalizer)
	if _, err := a.C.CS.CoreV1().Pods(a.Ns).Patch(context.Background(), pod.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.release(pod.Name) })
	return pod.Name
}

func (a *k8sAcc) release(pod string) {
	_, _ = a.C.CS.CoreV1().Pods(a.Ns).Patch(context.Background(), pod, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
}

// outage: once the held pod is being deleted (the apply has changed the Deployment and
// is waiting), cut the proxy for cut, then release the pod and restore the proxy after
// restoreAfter more. It reports the connections refused while cut.
func (a *k8sAcc) outage(t *testing.T, p *cutProxy, pod string, cut, restoreAfter time.Duration) <-chan int64 {
	res := make(chan int64, 1)
	go func() {
		deadline := time.Now().Add(2 * time.Minute)
		for time.Now().Before(deadline) {
			got, err := a.C.CS.CoreV1().Pods(a.Ns).Get(context.Background(), pod, metav1.GetOptions{})
			if err == nil && got.DeletionTimestamp != nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		before := p.refused.Load()
		p.Cut()
		time.Sleep(cut)
		a.release(pod)
		time.Sleep(restoreAfter)
		n := p.refused.Load() - before
		p.Restore()
		res <- n
	}()
	return res
}

// TestAccK8sRollout_apiOutageDuringWait: the connection to the apiserver is cut during a
// good rollout's wait (the apiserver itself keeps running: a loopback proxy between the
// provider and it is cut). When it comes back within the wait, the apply succeeds with
// no rollback. When it is still cut at the end of the wait, the apply fails saying the
// readiness could not be read, and nothing is rolled back.
func TestAccK8sRollout_apiOutageDuringWait(t *testing.T) {
	a := newK8sAcc(t)
	kc, proxy := proxiedKubeconfig(t, a.Kc)
	a.Kc = kc
	var v2Ref string
	var refused <-chan int64
	short := func(cfg string) string {
		return strings.Replace(cfg, `rollout_wait = "90s"`, `rollout_wait = "12s"`, 1)
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{Config: a.Good("v1", "v1")},
			{
				// Cut for 8s, then the pod is let go; the proxy is back 3s later.
				PreConfig: func() { refused = a.outage(t, proxy, a.holdOldPod(t), 8*time.Second, 3*time.Second) },
				Config:    a.Good("v2", "v2"),
				Check: resource.ComposeTestCheckFunc(
					a.CheckRunsStateImage("web01"),
					func(s *terraform.State) error {
						v2Ref = acctest.StateAttr(s, "fediversity_k8s_rollout.web01", "image_ref")
						if n := <-refused; n == 0 {
							return fmt.Errorf("no connection reached the proxy while it was cut: the outage did not hit the wait")
						}
						if lg := acctest.StateAttr(s, "fediversity_k8s_rollout.web01", "last_good_image_ref"); lg != v2Ref {
							return fmt.Errorf("last_good_image_ref %s, want %s", lg, v2Ref)
						}
						return nil
					},
				),
			},
			{
				// Cut past the end of a 12s wait.
				PreConfig:   func() { refused = a.outage(t, proxy, a.holdOldPod(t), 20*time.Second, 2*time.Second) },
				Config:      short(a.Good("v3", "v3")),
				ExpectError: regexp.MustCompile(`(?s)readiness\s+of\s+.*could\s+not\s+be\s+read.*nothing\s+was\s+rolled\s+back`),
			},
			{
				PreConfig: func() {
					if n := <-refused; n == 0 {
						t.Fatal("no connection reached the proxy while it was cut")
					}
					v3, err := image.Head(context.Background(), image.Target{Registry: a.Reg.Host, Namespace: a.Ns, Node: "web01", Tag: "v3"}, image.Options{})
					if err != nil {
						t.Fatal(err)
					}
					img, _, err := a.DeploymentImage()
					if err != nil || img != v3.ImageRef {
						t.Fatalf("after the outage the Deployment names %s (err %v), want %s: nothing may be rolled back", img, err, v3.ImageRef)
					}
				},
				// The API is back and the pod is ready: the next apply converges.
				Config: short(a.Good("v3", "v3")),
				Check:  a.CheckRunsStateImage("web01"),
			},
		},
	})
}
