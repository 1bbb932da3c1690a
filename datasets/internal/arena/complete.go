package arena

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// ErrIncomplete is wrapped by CheckComplete's refusals: the file's header
// is sound but its data is cut short or its structure broken, so the
// loader could not decode it.
var ErrIncomplete = errors.New("image data incomplete")

// tailWindow is how much of a JPEG's end is read at a time while looking
// for its end-of-image marker: real files end with it, and the window only
// grows (back towards the scan) for a file with bytes after it.
const tailWindow = 8 << 10

// CheckComplete checks the structure of a JPEG or PNG of size bytes held
// in r, without decoding it (a full decode costs about a hundred times
// more; see BenchmarkCheckComplete), so that a truncated file is refused
// when a dataset is opened instead of failing the loader later.
//
// JPEG: the marker segments from SOI to the first SOS are walked by their
// lengths, and an EOI marker (FF D9) must follow the start of the scan
// data. Entropy-coded data cannot hold FF D9 (an FF there is always
// followed by 00 or a restart marker), so a file cut anywhere after its
// header lacks it; bytes after EOI are allowed, as decoders ignore them.
//
// PNG: the chunk sequence must start with IHDR, every chunk must lie
// within the file with a correct CRC (the decoder checks them too), and
// IEND must end it; bytes after IEND are allowed.
func CheckComplete(r io.ReaderAt, size int64, format string) error {
	var err error
	switch format {
	case "jpeg":
		err = checkJPEG(r, size)
	case "png":
		err = checkPNG(r, size)
	default:
		return fmt.Errorf("unsupported image format %q (want jpeg or png)", format)
	}
	if err != nil {
		return fmt.Errorf("%w: %s %v", ErrIncomplete, format, err)
	}
	return nil
}

func checkJPEG(r io.ReaderAt, size int64) error {
	var b [4]byte
	if _, err := r.ReadAt(b[:2], 0); err != nil || b[0] != 0xff || b[1] != 0xd8 {
		return errors.New("no start-of-image marker")
	}
	off := int64(2)
	var scan int64 // first byte of the entropy-coded data
	for scan == 0 {
		if _, err := r.ReadAt(b[:2], off); err != nil {
			return fmt.Errorf("ends at byte %d before its first scan (truncated)", off)
		}
		if b[0] != 0xff {
			return fmt.Errorf("byte %d: %#02x where a marker belongs", off, b[0])
		}
		m := b[1]
		switch {
		case m == 0xff: // fill byte before a marker
			off++
			continue
		case m == 0x01 || m >= 0xd0 && m <= 0xd7: // no length
			off += 2
			continue
		case m == 0xd8 || m == 0xd9:
			return fmt.Errorf("byte %d: marker %#02x before the first scan", off, m)
		}
		if _, err := r.ReadAt(b[2:4], off+2); err != nil {
			return fmt.Errorf("ends at byte %d inside a marker segment (truncated)", off+2)
		}
		n := int64(binary.BigEndian.Uint16(b[2:4]))
		if n < 2 || off+2+n > size {
			return fmt.Errorf("byte %d: marker %#02x segment of %d bytes runs past the end of the %d-byte file (truncated)", off, m, n, size)
		}
		if m == 0xda {
			scan = off + 2 + n
		}
		off += 2 + n
	}
	// Look for EOI from the end back to the scan, a window at a time; the
	// windows overlap by a byte so a marker split between them is found.
	buf := make([]byte, tailWindow)
	for hi := size; hi > scan; {
		lo := max(scan, hi-tailWindow)
		w := buf[:hi-lo]
		if _, err := r.ReadAt(w, lo); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		if bytes.Contains(w, []byte{0xff, 0xd9}) {
			return nil
		}
		if lo == scan {
			break
		}
		hi = lo + 1
	}
	return fmt.Errorf("no end-of-image marker after the scan starting at byte %d of %d (truncated)", scan, size)
}

var pngSignature = []byte("\x89PNG\r\n\x1a\n")

func checkPNG(r io.ReaderAt, size int64) error {
	var sig [8]byte
	if _, err := r.ReadAt(sig[:], 0); err != nil || !bytes.Equal(sig[:], pngSignature) {
		return errors.New("no PNG signature")
	}
	crc := crc32.NewIEEE()
	buf := make([]byte, 32<<10)
	var hdr [8]byte
	for off, first := int64(8), true; ; first = false {
		if _, err := r.ReadAt(hdr[:], off); err != nil {
			return fmt.Errorf("ends at byte %d without an IEND chunk (truncated)", off)
		}
		n := int64(binary.BigEndian.Uint32(hdr[:4]))
		typ := string(hdr[4:8])
		if n > 1<<31-1 || off+12+n > size {
			return fmt.Errorf("byte %d: %q chunk of %d bytes runs past the end of the %d-byte file (truncated)", off, typ, n, size)
		}
		if first != (typ == "IHDR") {
			return fmt.Errorf("byte %d: %q chunk where IHDR belongs first", off, typ)
		}
		crc.Reset()
		if _, err := io.CopyBuffer(crc, io.NewSectionReader(r, off+4, 4+n), buf); err != nil {
			return err
		}
		var want [4]byte
		if _, err := r.ReadAt(want[:], off+8+n); err != nil {
			return err
		}
		if crc.Sum32() != binary.BigEndian.Uint32(want[:]) {
			return fmt.Errorf("byte %d: %q chunk fails its CRC", off, typ)
		}
		if typ == "IEND" {
			return nil
		}
		off += 12 + n
	}
}
