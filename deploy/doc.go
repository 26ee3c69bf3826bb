// Package deploy holds the files that run forensic as a flight recorder on
// a fleet, and the tests that keep them honest: a systemd unit
// (systemd/forensic-flight.service), a Kubernetes DaemonSet and its
// namespace (kubernetes/), and the container image (Dockerfile). The tests
// validate the manifests against the schema of every supported Kubernetes
// release (package kubeschema), decode them into the Kubernetes API types,
// check the privileges, mounts and flags they use, and verify the unit
// with systemd-analyze where it is installed. docs/flight.md explains
// each choice.
package deploy
