package kubeschema

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// ErrModuleHash is a downloaded module whose content is not the one
// its Release pins.
var ErrModuleHash = errors.New("module hash differs")

// download is what `go mod download -json` says of one module.
type download struct {
	Dir   string
	Sum   string
	Error string
}

// Fetch makes sure the module of r is in the Go module cache, downloading
// it through GOPROXY when it is not, and returns the directory of its
// OpenAPI v3 schemas. goCmd is the go command to run ("go" finds it on
// PATH). A module whose hash is not r.Sum is refused.
func Fetch(ctx context.Context, goCmd string, r Release) (string, error) {
	// Outside any module, so that the download neither reads nor touches
	// a go.mod or go.work.
	tmp, err := os.MkdirTemp("", "kubeschema")
	if err != nil {
		return "", fmt.Errorf("%s: %w", r, err)
	}
	defer os.RemoveAll(tmp)
	cmd := exec.CommandContext(ctx, goCmd, "mod", "download", "-json", ModulePath+"@"+r.Module)
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "GOWORK=off", "GO111MODULE=on")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, runErr := cmd.Output()
	var d download
	if err := json.Unmarshal(out, &d); err != nil {
		return "", fmt.Errorf("%s: go mod download: %v: %s", r, runErr, strings.TrimSpace(stderr.String()))
	}
	switch {
	case d.Error != "":
		return "", fmt.Errorf("%s: go mod download: %s", r, d.Error)
	case runErr != nil:
		return "", fmt.Errorf("%s: go mod download: %w", r, runErr)
	case d.Sum != r.Sum:
		return "", fmt.Errorf("%s: %w: %s, want %s", r, ErrModuleHash, d.Sum, r.Sum)
	}
	dir := filepath.Join(d.Dir, "api", "openapi-spec", "v3")
	if _, err := os.Stat(dir); err != nil {
		return "", fmt.Errorf("%s: no OpenAPI v3 schemas in the module: %w", r, err)
	}
	return dir, nil
}

// specFile is the name of the file in the schema directory that
// describes apiVersion: "apps/v1" is apis__apps__v1_openapi.json, the
// core group's "v1" is api__v1_openapi.json.
func specFile(apiVersion string) string {
	if group, version, ok := strings.Cut(apiVersion, "/"); ok {
		return "apis__" + group + "__" + version + "_openapi.json"
	}
	return "api__" + apiVersion + "_openapi.json"
}

// FetchSupported fetches the schemas of every Supported release and
// returns a validator for each, oldest first.
func FetchSupported(ctx context.Context, goCmd string) ([]*Validator, error) {
	var vs []*Validator
	for _, r := range Supported() {
		dir, err := Fetch(ctx, goCmd, r)
		if err != nil {
			return nil, err
		}
		vs = append(vs, NewValidator(r, dir))
	}
	return vs, nil
}
