// Package sensitive names the files of a project that hold secrets: the
// sandbox masks them from commands and plugins, and the in-process tools
// refuse to read, search, list or write them without the permission the
// rules give for them.
package sensitive

import (
	"path"
	"strings"
)

// Names are the file-name patterns (matched against a path's last
// element, case-insensitively) of files that hold secrets.
var Names = []string{
	".env", ".env.*", // dotenv files (.env.example and .env.sample excepted)
	"*.pem", "*.key", "*.p12", "*.pfx", "*.jks", "*.keystore", // keys and key stores
	"id_rsa", "id_rsa.*", "id_dsa", "id_dsa.*", "id_ecdsa", "id_ecdsa.*", "id_ed25519", "id_ed25519.*", // SSH keys
	".netrc", ".npmrc", ".pypirc", ".git-credentials", ".pgpass", ".htpasswd", // credential stores of tools
	"credentials", "credentials.json", "*.credentials.json", "service-account*.json", // cloud credentials
	"secrets.yml", "secrets.yaml", "secrets.json", "*.secret", "*.secrets",
}

// Excepted are names that match Names but are templates without secrets.
var Excepted = []string{".env.example", ".env.sample", ".env.template", ".env.dist", "*.pub"}

// DirNames are directory names whose whole content holds secrets.
var DirNames = []string{".ssh", ".gnupg", ".aws", ".azure", ".docker", ".kube"}

// Name reports whether a file name (a path's last element) is a
// sensitive file.
func Name(name string) bool {
	n := strings.ToLower(name)
	for _, p := range Excepted {
		if ok, _ := path.Match(p, n); ok {
			return false
		}
	}
	for _, p := range Names {
		if ok, _ := path.Match(p, n); ok {
			return true
		}
	}
	return false
}

// Dir reports whether a directory name is a directory of secrets.
func Dir(name string) bool {
	n := strings.ToLower(name)
	for _, d := range DirNames {
		if n == d {
			return true
		}
	}
	return false
}

// Path reports whether a slash-separated path (relative or absolute) is
// a sensitive file or lies in a directory of secrets.
func Path(p string) bool {
	p = strings.TrimSuffix(p, "/")
	parts := strings.Split(p, "/")
	for _, d := range parts[:len(parts)-1] {
		if Dir(d) {
			return true
		}
	}
	last := parts[len(parts)-1]
	return Name(last) || Dir(last)
}
