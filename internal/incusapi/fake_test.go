package incusapi

// These tests use an httptest server on 127.0.0.1 in place of incusd. A fake is used
// only for faults the real daemon cannot be made to show on demand: a 500 with error
// text, a failed operation, malformed JSON, an operation still running when the wait
// ends, an oversized response, and a server certificate that does not match the pin.
// Everything a user meets on a healthy daemon is tested against the real incusd in
// lab_test.go.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// reply writes a fake daemon's response body; a failed write fails the test.
func reply(t *testing.T, w io.Writer, body string) {
	t.Helper()
	if _, err := io.WriteString(w, body); err != nil {
		t.Errorf("fake incusd: writing response: %v", err)
	}
}

func fakeClient(t *testing.T, h http.HandlerFunc) *Client {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &Client{hc: srv.Client(), base: srv.URL}
}

func TestErrorCarriesDaemonTextInstanceAndProject(t *testing.T) {
	c := fakeClient(t, func(w http.ResponseWriter, r *http.Request) {
		if got := r.URL.Query().Get("project"); got != "tenant-a" {
			t.Errorf("project query = %q, want tenant-a", got)
		}
		w.WriteHeader(http.StatusInternalServerError)
		reply(t, w, `{"type":"error","error":"Failed to load instance: disk on fire","error_code":500,"metadata":null}`)
	}).WithProject("tenant-a")
	_, err := c.GetInstance(context.Background(), "web01")
	var ae *APIError
	if !errors.As(err, &ae) {
		t.Fatalf("want *APIError, got %T %v", err, err)
	}
	if ae.StatusCode != 500 || ae.Message != "Failed to load instance: disk on fire" || ae.Instance != "web01" || ae.Project != "tenant-a" || ae.Op != "get instance" {
		t.Fatalf("APIError = %+v", ae)
	}
	for _, want := range []string{"web01", "tenant-a", "disk on fire", "500"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if IsNotFound(err) {
		t.Error("a 500 is not a not-found")
	}
}

func TestOperationFailureCarriesOperationError(t *testing.T) {
	c := fakeClient(t, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/snapshots"):
			w.WriteHeader(http.StatusAccepted)
			reply(t, w, `{"type":"async","status":"Operation created","status_code":100,"operation":"/1.0/operations/op-1","metadata":{"id":"op-1","status":"Running","status_code":103}}`)
		case r.URL.Path == "/1.0/operations/op-1/wait":
			reply(t, w, `{"type":"sync","status":"Success","status_code":200,"metadata":{"id":"op-1","status":"Failure","status_code":400,"err":"Create instance snapshot: no space left on device"}}`)
		default:
			http.NotFound(w, r)
		}
	})
	err := c.CreateSnapshot(context.Background(), "web01", "s1")
	var ae *APIError
	if !errors.As(err, &ae) || ae.StatusCode != 400 || !strings.Contains(ae.Message, "no space left") || ae.Instance != "web01" {
		t.Fatalf("want failed-operation APIError, got %v", err)
	}
}

func TestMalformedJSONIsAnError(t *testing.T) {
	c := fakeClient(t, func(w http.ResponseWriter, r *http.Request) {
		reply(t, w, `{"type":"sync","metadata":{"status":`)
	})
	_, err := c.GetInstanceState(context.Background(), "web01")
	var ae *APIError
	if !errors.As(err, &ae) || !strings.Contains(ae.Message, "malformed") {
		t.Fatalf("want malformed-response APIError, got %v", err)
	}
}

func TestOversizedResponseIsRefused(t *testing.T) {
	c := fakeClient(t, func(w http.ResponseWriter, r *http.Request) {
		chunk := strings.Repeat("x", 1<<16)
		parts := []string{`{"type":"sync","metadata":{"name":"`}
		for i := 0; i < (MaxJSONResponse>>16)+2; i++ {
			parts = append(parts, chunk)
		}
		for _, p := range append(parts, `"}}`) {
			if _, err := io.WriteString(w, p); err != nil {
				return // the client stopped reading at its limit, as it should
			}
		}
	})
	_, err := c.GetInstance(context.Background(), "web01")
	if err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("want size-limit error, got %v", err)
	}
}

func TestOperationWaitEndsAtTimeout(t *testing.T) {
	var waits atomic.Int32
	c := fakeClient(t, func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/wait") {
			http.NotFound(w, r)
			return
		}
		n := waits.Add(1)
		if r.URL.Query().Get("timeout") == "" {
			t.Errorf("wait without a timeout parameter: %s", r.URL)
		}
		// Answer at once as if the wait's own timeout had passed: Incus 6.0 answers
		// 500 "context deadline exceeded" (see TestLabOperationWaitTimeout); other
		// versions answer the operation still running. Both mean "ask again".
		if n%2 == 0 {
			w.WriteHeader(http.StatusInternalServerError)
			reply(t, w, `{"type":"error","error":"context deadline exceeded","error_code":500}`)
			return
		}
		reply(t, w, `{"type":"sync","metadata":{"id":"op-2","status":"Running","status_code":103}}`)
	})
	_, err := c.WaitOperation(context.Background(), "op-2", 1500*time.Millisecond)
	var te *OperationTimeoutError
	if !errors.As(err, &te) || te.ID != "op-2" {
		t.Fatalf("want OperationTimeoutError, got %v", err)
	}
	if n := waits.Load(); n < 2 || n > 1000 {
		t.Fatalf("wait requests = %d, want a bounded number > 1", n)
	}
}

// A daemon that answers one wait request not at all (busy: CI saw incusd stall for over
// 10 s under load) is asked again within the wait's deadline, and the wait ends in the
// operation's result, not in "cannot reach the daemon".
func TestOperationWaitAsksAgainAfterAStalledRequest(t *testing.T) {
	defer func(h, s time.Duration) { waitHold, waitSlack = h, s }(waitHold, waitSlack)
	waitHold, waitSlack = time.Second, 200*time.Millisecond
	var waits atomic.Int32
	c := fakeClient(t, func(w http.ResponseWriter, r *http.Request) {
		if waits.Add(1) == 1 {
			<-r.Context().Done() // the first request gets no answer
			return
		}
		reply(t, w, `{"type":"sync","metadata":{"id":"op-5","status":"Success","status_code":200}}`)
	})
	op, err := c.WaitOperation(context.Background(), "op-5", time.Minute)
	if err != nil || op.ID != "op-5" {
		t.Fatalf("wait after a stalled request: %+v, %v", op, err)
	}
	if n := waits.Load(); n != 2 {
		t.Fatalf("wait requests = %d, want 2 (the stalled one, then its answer)", n)
	}
}

// A daemon that never answers ends the wait at its deadline, as an operation still
// running would: the stalls are bounded by it.
func TestOperationWaitOnAStalledDaemonEndsAtTheDeadline(t *testing.T) {
	defer func(h, s time.Duration) { waitHold, waitSlack = h, s }(waitHold, waitSlack)
	waitHold, waitSlack = time.Second, 100*time.Millisecond
	c := fakeClient(t, func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	})
	start := time.Now()
	_, err := c.WaitOperation(context.Background(), "op-6", 3*time.Second)
	var te *OperationTimeoutError
	if !errors.As(err, &te) {
		t.Fatalf("want OperationTimeoutError, got %v", err)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Fatalf("the wait on a stalled daemon took %s, past its 3 s deadline by far", took)
	}
}

func TestOperationWaitHonoursContext(t *testing.T) {
	c := fakeClient(t, func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // hold the request like a long daemon wait
	})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(200 * time.Millisecond); cancel() }()
	_, err := c.WaitOperation(ctx, "op-3", time.Hour)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("want context.Canceled, got %v", err)
	}
}

func TestExecReadsReturnAndLogsThenDeletesThem(t *testing.T) {
	var deleted atomic.Int32
	c := fakeClient(t, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/1.0/instances/web01/exec":
			reply(t, w, `{"type":"async","operation":"/1.0/operations/op-4","metadata":{"id":"op-4","status_code":103}}`)
		case r.URL.Path == "/1.0/operations/op-4/wait":
			reply(t, w, `{"type":"sync","metadata":{"id":"op-4","status":"Success","status_code":200,"metadata":{"return":3,"output":{"1":"/1.0/instances/web01/logs/exec_x.stdout","2":"/1.0/instances/web01/logs/exec_x.stderr"}}}}`)
		case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/1.0/instances/web01/logs/"):
			reply(t, w, strings.TrimPrefix(r.URL.Path, "/1.0/instances/web01/logs/"))
		case r.Method == http.MethodDelete && strings.HasPrefix(r.URL.Path, "/1.0/instances/web01/logs/"):
			deleted.Add(1)
			reply(t, w, `{"type":"sync","metadata":{}}`)
		default:
			http.NotFound(w, r)
		}
	})
	res, err := c.Exec(context.Background(), "web01", ExecRequest{Command: []string{"false"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 3 || string(res.Stdout) != "exec_x.stdout" || string(res.Stderr) != "exec_x.stderr" {
		t.Fatalf("result = %d %q %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	if deleted.Load() != 2 {
		t.Fatalf("deleted %d logs, want 2", deleted.Load())
	}
}

func TestExecRefusesForeignLogPath(t *testing.T) {
	c := fakeClient(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/1.0/instances/web01/exec":
			reply(t, w, `{"type":"async","metadata":{"id":"op-5"}}`)
		case "/1.0/operations/op-5/wait":
			reply(t, w, `{"type":"sync","metadata":{"id":"op-5","status_code":200,"metadata":{"return":0,"output":{"1":"/1.0/certificates?x"}}}}`)
		default:
			t.Errorf("unexpected request %s %s", r.Method, r.URL)
			http.NotFound(w, r)
		}
	})
	_, err := c.Exec(context.Background(), "web01", ExecRequest{Command: []string{"true"}})
	if err == nil || !strings.Contains(err.Error(), "unexpected output log path") {
		t.Fatalf("want log path refusal, got %v", err)
	}
}

// selfSigned writes a self-signed certificate and key for 127.0.0.1 into dir.
func selfSigned(t *testing.T, dir, name string) (certFile, keyFile string, pair tls.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile = filepath.Join(dir, name+".crt")
	keyFile = filepath.Join(dir, name+".key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	pair, err = tls.X509KeyPair(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}))
	if err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile, pair
}

// The HTTPS test uses a TLS server on 127.0.0.1 because it must also show a server
// presenting the wrong certificate, which a real daemon cannot be made to do.
func TestHTTPSPinsServerCertAndSendsClientCert(t *testing.T) {
	dir := t.TempDir()
	srvCert, _, srvPair := selfSigned(t, dir, "server")
	otherCert, _, _ := selfSigned(t, dir, "other")
	cliCert, cliKey, _ := selfSigned(t, dir, "client")

	var sawClientCert atomic.Bool
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS != nil && len(r.TLS.PeerCertificates) == 1 && r.TLS.PeerCertificates[0].Subject.CommonName == "client" {
			sawClientCert.Store(true)
		}
		reply(t, w, `{"type":"sync","metadata":{"status":"Running","status_code":103}}`)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{srvPair}, ClientAuth: tls.RequireAnyClientCert, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(srv.Close)

	good, err := NewHTTPS(HTTPSConfig{URL: srv.URL, ClientCertFile: cliCert, ClientKeyFile: cliKey, ServerCertFile: srvCert})
	if err != nil {
		t.Fatal(err)
	}
	st, err := good.GetInstanceState(context.Background(), "web01")
	if err != nil {
		t.Fatalf("pinned server refused: %v", err)
	}
	if !st.Running() || !sawClientCert.Load() {
		t.Fatalf("state %+v, client cert seen %v", st, sawClientCert.Load())
	}

	bad, err := NewHTTPS(HTTPSConfig{URL: srv.URL, ClientCertFile: cliCert, ClientKeyFile: cliKey, ServerCertFile: otherCert})
	if err != nil {
		t.Fatal(err)
	}
	_, err = bad.GetInstanceState(context.Background(), "web01")
	if err == nil || !strings.Contains(err.Error(), "pinned certificate") {
		t.Fatalf("want pin mismatch, got %v", err)
	}
}

func TestNewHTTPSRejectsBadConfig(t *testing.T) {
	for _, cfg := range []HTTPSConfig{
		{URL: "http://127.0.0.1:8443", ClientCertFile: "a", ClientKeyFile: "b", ServerCertFile: "c"},
		{URL: "https://127.0.0.1:8443"},
		{URL: "https://127.0.0.1:8443", ClientCertFile: "/nonexistent", ClientKeyFile: "/nonexistent", ServerCertFile: "c"},
	} {
		if _, err := NewHTTPS(cfg); err == nil {
			t.Errorf("NewHTTPS(%+v) accepted", cfg)
		}
	}
}

func TestNewUnixNamesMissingSocket(t *testing.T) {
	_, err := NewUnix(filepath.Join(t.TempDir(), "none.socket"))
	if err == nil || !strings.Contains(err.Error(), "INCUS_SOCKET") {
		t.Fatalf("want a hint about INCUS_SOCKET, got %v", err)
	}
}

// A fake daemon, because incusd cannot be made to drop the connection after it did a
// delete and before it answered: the retry then finds nothing, and that is the first
// try's own work, not a 404 for the caller. A first try that finds nothing is still a
// not-found.
func TestRetriedDeleteWhoseAnswerWasLostIsNotANotFound(t *testing.T) {
	var deletes atomic.Int32
	var gone atomic.Bool
	c := fakeClient(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodDelete {
			http.NotFound(w, r)
			return
		}
		deletes.Add(1)
		if gone.Load() {
			w.WriteHeader(http.StatusNotFound)
			reply(t, w, `{"type":"error","error":"Not Found","error_code":404}`)
			return
		}
		gone.Store(true) // deleted, and then the answer is lost
		hj, _ := w.(http.Hijacker)
		conn, _, _ := hj.Hijack()
		_ = conn.Close()
	})
	ctx := context.Background()
	if err := c.DeleteFile(ctx, "web01", "/run/x"); err != nil || deletes.Load() != 2 {
		t.Fatalf("file delete whose first answer was lost: err=%v after %d tries, want success after 2", err, deletes.Load())
	}
	gone.Store(false)
	deletes.Store(0)
	if err := c.DeleteInstance(ctx, "web01"); err != nil || deletes.Load() != 2 {
		t.Fatalf("instance delete whose first answer was lost: err=%v after %d tries, want success after 2", err, deletes.Load())
	}
	deletes.Store(0)
	if err := c.DeleteSnapshot(ctx, "web01", "snap"); !IsNotFound(err) || deletes.Load() != 1 {
		t.Fatalf("delete of what is not there: err=%v after %d tries, want a not-found at once", err, deletes.Load())
	}
}
