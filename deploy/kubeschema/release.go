// Package kubeschema validates Kubernetes manifests against the OpenAPI
// schema that a given Kubernetes release publishes, the way its API
// server's strict field validation reads them: an unknown field, a value
// of the wrong type or a missing required field is an error, and so is a
// field the release does not have yet.
//
// The schemas are the api/openapi-spec/v3 files of the k8s.io/kubernetes
// module of each release, fetched with `go mod download` (through
// GOPROXY, checked against the checksum database and against the hash
// each Release pins) into the Go module cache; nothing is vendored here.
// The validator is github.com/santhosh-tekuri/jsonschema/v6.
package kubeschema

// Release is one Kubernetes release whose schema manifests are checked
// against.
type Release struct {
	// Minor is the release as operators name it, "1.30".
	Minor string
	// Module is the k8s.io/kubernetes module version whose schema is
	// used: the newest patch release of Minor when it was pinned.
	Module string
	// Sum is the module's go.sum hash (h1:...): a download with another
	// content is refused, whatever GOSUMDB says.
	Sum string
}

// ModulePath is the Go module that holds the Kubernetes OpenAPI schemas.
const ModulePath = "k8s.io/kubernetes"

// Supported are the Kubernetes releases the shipped manifests are
// validated against, oldest first.
func Supported() []Release {
	return []Release{
		{"1.29", "v1.29.15", "h1:hLcyf3XmxtfkubCEmmPX5QVD7lDclXjvEUrJeP283LM="},
		{"1.30", "v1.30.14", "h1:MrlKXh9uhLIJpyxOeXhcndzRVSvwiV9iJ8NgH8nqPsg="},
		{"1.31", "v1.31.14", "h1:UtjLfqvXLuSVDdJ4+NpQCIfFkKkLnAAVmxAEMsnkhjk="},
		{"1.32", "v1.32.13", "h1:5TGYdZ6YZqdp6h/Rp1vX/4TIoybMPdgv97LCZCtPuNQ="},
		{"1.33", "v1.33.13", "h1:bmH31xUdSzeA5vk0wZAK9MZp11mdLuzUSeKk0qN3hPQ="},
	}
}

// String names the release and the module version its schema is from,
// "Kubernetes 1.30 (v1.30.14)".
func (r Release) String() string {
	return "Kubernetes " + r.Minor + " (" + r.Module + ")"
}
