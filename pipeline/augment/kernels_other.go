//go:build !amd64 || purego

package augment

func (t *hsvTable) applyRow(r, g, b []uint8) { t.applyRowGo(r, g, b) }
