// Command labregistry is lab tooling for lab/k8s/bench.sh: it serves an in-memory OCI
// registry (go-containerregistry's registry package) on a loopback address, or writes a
// random one-layer image as a docker-archive, the format of a Nix-built node image.
//
//	labregistry -listen 127.0.0.1:5000
//	labregistry -write-archive /tmp/node.tar
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "loopback address to serve the registry on")
	archive := flag.String("write-archive", "", "write a random image as a docker-archive to this path and exit")
	flag.Parse()
	if *archive != "" {
		img, err := random.Image(1024, 1)
		if err != nil {
			log.Fatal(err)
		}
		tag, _ := name.NewTag("fediversity.local/node:bench")
		if err := tarball.WriteToFile(*archive, tag, img); err != nil {
			log.Fatal(err)
		}
		return
	}
	if !strings.HasPrefix(*listen, "127.0.0.1:") {
		log.Fatal("-listen must be a 127.0.0.1 address")
	}
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(l.Addr().String())
	log.Fatal(http.Serve(l, registry.New(registry.Logger(log.New(io.Discard, "", 0)))))
}
