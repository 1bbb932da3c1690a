// Package deploy holds segpipe's Kubernetes manifests (plain YAML and a
// kustomization.yaml, applied with `kubectl apply -k deploy/`) and the test
// that decodes each of them strictly with the Kubernetes API types and
// checks their wiring against the segpipe command line. Nothing imports
// it: the Kubernetes modules are needed by its test only, never by the
// segpipe binary.
package deploy
