package sensitive

import "testing"

func TestPath(t *testing.T) {
	for p, want := range map[string]bool{
		".env": true, "app/.env": true, ".env.local": true, ".ENV.production": true, "a/.env.example": false, ".env.sample": false,
		"server.pem": true, "tls/server.key": true, "id_ed25519": true, "id_ed25519.pub": false, ".ssh/config": true,
		"home/.aws/config": true, ".npmrc": true, "creds/credentials.json": true, "main.go": false, "env.go": false,
		"keys.go": false, "README.md": false, ".envrc": false, "x/.gnupg": true, "secrets.yaml": true,
	} {
		if got := Path(p); got != want {
			t.Errorf("Path(%q) = %v, want %v", p, got, want)
		}
	}
}
