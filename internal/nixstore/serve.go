package nixstore

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// The legacy serve protocol of `nix-store --serve` (Nix's serve-protocol.hh), the one
// `nix copy --to ssh://` speaks: a greeting, then commands, each a little-endian uint64
// and its arguments in the archive's string encoding.
const (
	serveMagicClient = 0x390c9deb
	// serveVersion 2.5 is the first with cmdAddToStoreNar; nodes of any later Nix
	// accept it.
	serveVersion      = 0x205
	cmdAddToStoreNar  = 9
	serveHashTypeName = "sha256:"
)

// ServeCommand is what runs on the node to take AddToStoreStream's stream: `nix-store
// --serve --write` adds each store object as its archive arrives, streaming it to disk
// and checking its hash and size, where `nix-store --import` (Nix 2.8, the lab nodes')
// first reads each whole archive into memory: a 512 MiB copy ran at 0.42 times `nix
// copy --to ssh://` through the import, which the serve command runs at. Its answers on
// stdout are not needed (the stream does not wait for them): the exit status says
// whether every object was added.
var ServeCommand = []string{"nix-store", "--serve", "--write"}

// PathInfo is what the local store knows of a store object, as the node's store must
// register it.
type PathInfo struct {
	Path       string
	NarHash    string // hex SHA-256 of the object's archive
	NarSize    int64
	Deriver    string // empty when none is known
	References []string
}

// QueryPathInfos asks the local store (`nix-store --dump-db`, one start for all the
// paths) for the registration of each of paths, keyed by path.
func QueryPathInfos(ctx context.Context, paths []string) (map[string]PathInfo, error) {
	if err := checkPaths(paths); err != nil {
		return nil, fmt.Errorf("path info: %w", err)
	}
	out, err := dumpDB(ctx, paths)
	if err != nil {
		return nil, fmt.Errorf("path info of %d paths: %w", len(paths), err)
	}
	infos, err := parseRegistrations(bytes.NewReader(out))
	if err != nil {
		return nil, fmt.Errorf("path info: nix-store --dump-db printed %w", err)
	}
	for _, p := range paths {
		if _, ok := infos[p]; !ok {
			return nil, fmt.Errorf("path info: the local store does not hold %s as valid", p)
		}
	}
	return infos, nil
}

// Registrations is the registrations of paths in the local store, in the form
// `nix-store --load-db` reads (what `nix-store --dump-db` prints): what a store that
// was given the paths' files some other way needs to hold them as valid, e.g. an
// image's /nix-path-registration.
func Registrations(ctx context.Context, paths []string) ([]byte, error) {
	if err := checkPaths(paths); err != nil {
		return nil, fmt.Errorf("registrations: %w", err)
	}
	return dumpDB(ctx, paths)
}

func dumpDB(ctx context.Context, paths []string) ([]byte, error) {
	var out bytes.Buffer
	if err := run(ctx, &out, NixStoreBin, append([]string{"--dump-db"}, paths...)...); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// parseRegistrations reads Nix's validity registrations (`nix-store --dump-db`): per
// path its name, NAR hash (hex), NAR size, deriver (an empty line for none), the number
// of references and each reference, one a line.
func parseRegistrations(r io.Reader) (map[string]PathInfo, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	line := func(what string) (string, error) {
		if !sc.Scan() {
			if err := sc.Err(); err != nil {
				return "", err
			}
			return "", fmt.Errorf("a registration cut short (no %s)", what)
		}
		return sc.Text(), nil
	}
	infos := map[string]PathInfo{}
	for sc.Scan() {
		info := PathInfo{Path: sc.Text()}
		if info.Path == "" {
			continue
		}
		if !ValidStorePath(info.Path) {
			return nil, fmt.Errorf("%q where a store path was due", info.Path)
		}
		var err error
		if info.NarHash, err = line("hash"); err != nil {
			return nil, err
		}
		if len(info.NarHash) != 64 || strings.Trim(info.NarHash, "0123456789abcdef") != "" {
			return nil, fmt.Errorf("%q as the hex SHA-256 of %s", info.NarHash, info.Path)
		}
		size, err := line("size")
		if err != nil {
			return nil, err
		}
		if info.NarSize, err = strconv.ParseInt(size, 10, 64); err != nil || info.NarSize <= 0 {
			return nil, fmt.Errorf("%q as the archive size of %s", size, info.Path)
		}
		if info.Deriver, err = line("deriver"); err != nil {
			return nil, err
		}
		count, err := line("reference count")
		if err != nil {
			return nil, err
		}
		n, err := strconv.Atoi(count)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%q as the reference count of %s", count, info.Path)
		}
		for range n {
			ref, err := line("reference")
			if err != nil {
				return nil, err
			}
			info.References = append(info.References, ref)
		}
		infos[info.Path] = info
	}
	return infos, sc.Err()
}

// AddToStoreStream writes, for ServeCommand on the node, the store objects of paths,
// in the order given (a path after the paths it references, as Closure lists them:
// the node registers each as it arrives, and refuses one whose references it lacks).
// Each object is its registration, then its archive (WriteNAR, from the local store).
// An archive whose length is not the one the local store registered ends the stream
// with an error: the node would read the rest of it as the next command.
//
// A break anywhere leaves the node's store consistent: it adds an object only once its
// archive arrived whole and hashed right, so it holds every object before the break
// and none of the one cut, and the next copy asks again and sends only the rest.
//
// The stream goes out in writes of streamChunk bytes: an archive is made of small
// fields (a string is three writes: its length, its bytes, its padding), and written
// one by one each field became a packet of its own on the way to the node (an SSH
// packet, an Incus websocket frame), encrypted, forwarded by every proxy on the way and
// read on the node one at a time.
func AddToStoreStream(ctx context.Context, paths []string, w io.Writer) error {
	if len(paths) == 0 {
		return fmt.Errorf("add to store: no paths given")
	}
	infos, err := QueryPathInfos(ctx, paths)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(w, streamChunk)
	s := &narWriter{w: bw}
	s.u64(serveMagicClient)
	s.u64(serveVersion)
	for _, p := range paths {
		if err := ctx.Err(); err != nil {
			return err
		}
		info := infos[p]
		s.u64(cmdAddToStoreNar)
		s.str(info.Path)
		s.str(info.Deriver)
		s.str(serveHashTypeName + info.NarHash)
		s.u64(uint64(len(info.References)))
		for _, r := range info.References {
			s.str(r)
		}
		s.u64(0) // registration time: the node's now
		s.u64(uint64(info.NarSize))
		s.u64(0)  // not built by the node ("ultimate")
		s.u64(0)  // no signatures
		s.str("") // no content address
		if s.err != nil {
			return fmt.Errorf("add to store: %w", s.err)
		}
		n, err := WriteNAR(bw, p)
		if err != nil {
			return fmt.Errorf("add to store: archive of %s: %w", p, err)
		}
		if n != info.NarSize {
			return fmt.Errorf("add to store: the archive of %s is %d bytes where the local store registered %d (is the store path modified?)", p, n, info.NarSize)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("add to store: %w", err)
	}
	return nil
}

// streamChunk is the size of AddToStoreStream's writes: two SSH packets' worth (a
// channel's packet is at most 32 KiB).
const streamChunk = 64 << 10
