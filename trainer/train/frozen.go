package train

// FrozenReference names the newest frozen CPU reference,
// testdata/frozen/<FrozenReference>/ at the repository root: digests of the
// loader's first batches, the first training-step loss items of variant n
// at 128 px on the CPU backend, and the evaluation of the checkpoint those
// steps produce, all for fixed seeds. A device backend is judged against
// the CPU reference, so the reference itself must not drift unnoticed: a
// test holds the code to the newest set, and scripts/freeze-reference.sh
// writes a new one only when a release is cut.
const FrozenReference = "0.1.0"
