// Command mkimages writes the small images the COCO fixtures refer to.
// Run from the repository root: go run ./testdata/coco/mkimages
package main

import (
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"log"
	"os"
	"path/filepath"
)

func main() {
	dir := filepath.Join("testdata", "coco", "images")
	img := image.NewRGBA(image.Rect(0, 0, 16, 12))
	for y := range 12 {
		for x := range 16 {
			img.Set(x, y, color.RGBA{uint8(16 * x), uint8(20 * y), 128, 255})
		}
	}
	write := func(name string, enc func(*os.File) error) {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			log.Fatal(err)
		}
		if err := enc(f); err != nil {
			log.Fatal(err)
		}
		if err := f.Close(); err != nil {
			log.Fatal(err)
		}
	}
	write("a.png", func(f *os.File) error { return png.Encode(f, img) })
	write("b.jpg", func(f *os.File) error { return jpeg.Encode(f, img, &jpeg.Options{Quality: 90}) })
	// A JPEG start-of-image marker followed by garbage: the header is corrupt.
	write("corrupt.jpg", func(f *os.File) error {
		_, err := f.Write([]byte("\xff\xd8\xff\xe0 this is not a JPEG header at all"))
		return err
	})
	write("notimage.jpg", func(f *os.File) error {
		_, err := f.Write([]byte("GIF89a-ish text, neither JPEG nor PNG\n"))
		return err
	})
}
