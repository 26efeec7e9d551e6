package plugins

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// NPMRegistry is the registry npm is configured with for the server's
// user, for a server whose Caddyfile names none: the npm_config_registry
// environment variable (in any case), else the registry= line of the
// user's .npmrc (the file npm_config_userconfig names, or ~/.npmrc), else
// what `npm config get registry` answers (npm's global configuration and
// its built-in default), run outside any project so that no project's
// .npmrc is read. An error when none of these names one (npm is not
// installed, say).
func NPMRegistry(ctx context.Context) (string, error) {
	return npmRegistry(ctx, os.Environ(), "npm")
}

func npmRegistry(ctx context.Context, environ []string, npm string) (string, error) {
	env := func(name string) string {
		for _, kv := range environ {
			if k, v, ok := strings.Cut(kv, "="); ok && strings.EqualFold(k, name) && v != "" {
				return v
			}
		}
		return ""
	}
	if reg := env("npm_config_registry"); reg != "" {
		return reg, nil
	}
	rc := env("npm_config_userconfig")
	if rc == "" {
		if home := env("HOME"); home != "" {
			rc = filepath.Join(home, ".npmrc")
		}
	}
	if rc != "" {
		if reg := npmrcRegistry(rc); reg != "" {
			return reg, nil
		}
	}
	path, err := exec.LookPath(npm)
	if err != nil {
		return "", errors.New("npm is not installed")
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "config", "get", "registry", "--logs-max=0", "--no-update-notifier")
	cmd.Dir = "/"
	cmd.Env = environ
	out, err := cmd.Output()
	if err != nil {
		return "", errors.New("npm config get registry failed: " + err.Error())
	}
	reg := strings.TrimSpace(string(out))
	if reg == "" || reg == "undefined" {
		return "", errors.New("npm config get registry named none")
	}
	return reg, nil
}

// npmrcRegistry is the registry= value of an .npmrc, or "".
func npmrcRegistry(file string) string {
	f, err := os.Open(file)
	if err != nil {
		return ""
	}
	defer f.Close()
	reg := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if ok && strings.TrimSpace(k) == "registry" {
			reg = strings.Trim(strings.TrimSpace(v), `"'`)
		}
	}
	return reg
}
