package web

import (
	"time"

	"github.com/agentgate/agentgate/internal/clock"
	"github.com/agentgate/agentgate/internal/ratelimit"
)

// Sign-in delays. A wrong password never locks a person out: it makes
// further attempts wait, and the waits are kept where the guessing happens,
// so that someone guessing from elsewhere cannot keep a person out of their
// own Console. Three counters, each delay measured from the counter's
// latest failure (see ratelimit.Backoff):
//
//   - per account and address: 5 free failures, then 1 s, 2 s, 4 s, …
//     doubling with every failure up to 15 minutes. A sign-in of that
//     account from that address resets it.
//   - per address, whatever the email: 20 free failures, then the same
//     doubling up to 15 minutes. A success does not reset it (a guesser
//     with an account of their own must not be able to buy more attempts
//     for others).
//   - per account, whatever the address, against guessing spread over many
//     addresses: it counts only the failures an address makes within its
//     own 5 free ones for that account (later ones are already slowed per
//     address), has 10 free failures, then waits 1 s, doubling every 5
//     failures, up to 30 s. It does not apply at an address where that
//     account signed in during the last 30 days.
//
// Counters with no failure for 24 hours are forgotten. A refused attempt
// checks no password and counts nothing; its answer is 429 with
// Retry-After, the longest of the waits that apply.
const (
	SignInFreePerAccountAddress = 5
	SignInFreePerAddress        = 20
	SignInFreePerAccount        = 10
	// SignInMaxDelay caps the per-address delays.
	SignInMaxDelay = 15 * time.Minute
	// SignInMaxAccountDelay caps the account-wide delay: the longest a
	// person signing in from a new address waits while others guess.
	SignInMaxAccountDelay = 30 * time.Second
	// SignInForget is how long a counter without failures is kept.
	SignInForget = 24 * time.Hour
	// SignInKnownAddress is how long an address where an account signed in
	// is exempt from the account-wide delay.
	SignInKnownAddress = 30 * 24 * time.Hour
)

// signInDelays are the sign-in counters of one Console.
type signInDelays struct {
	pair, addr, account *ratelimit.Backoff
	// known holds the (account, address) pairs that signed in recently: a
	// Backoff used as a bounded set whose members expire.
	known *ratelimit.Backoff
}

func newSignInDelays(clk clock.Clock) *signInDelays {
	perAddress := func(free int) *ratelimit.Backoff {
		return &ratelimit.Backoff{Free: free, Step: 1, Base: time.Second, Max: SignInMaxDelay, Forget: SignInForget,
			Clock: clk, Cap: ratelimit.DefaultCap}
	}
	return &signInDelays{
		pair: perAddress(SignInFreePerAccountAddress),
		addr: perAddress(SignInFreePerAddress),
		account: &ratelimit.Backoff{Free: SignInFreePerAccount, Step: 5, Base: time.Second, Max: SignInMaxAccountDelay,
			Forget: SignInForget, Clock: clk, Cap: ratelimit.DefaultCap},
		known: &ratelimit.Backoff{Free: 1 << 30, Forget: SignInKnownAddress, Clock: clk, Cap: ratelimit.DefaultCap},
	}
}

func pairKey(email, ip string) string { return email + "\x00" + ip }

// wait is how long an attempt for email from ip must still wait (zero: it
// may be checked now).
func (d *signInDelays) wait(email, ip string) time.Duration {
	w := max(d.pair.Wait(pairKey(email, ip)), d.addr.Wait(ip))
	if d.known.Failures(pairKey(email, ip)) == 0 {
		w = max(w, d.account.Wait(email))
	}
	return w
}

// failed counts a wrong email or password.
func (d *signInDelays) failed(email, ip string) {
	n := d.pair.Fail(pairKey(email, ip))
	d.addr.Fail(ip)
	if n <= SignInFreePerAccountAddress {
		d.account.Fail(email)
	}
}

// succeeded resets the account's count at this address and remembers the
// address for the account.
func (d *signInDelays) succeeded(email, ip string) {
	d.pair.Reset(pairKey(email, ip))
	d.known.Fail(pairKey(email, ip))
}
