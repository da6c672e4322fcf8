package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

// credentialFlags are --token and --token-file, the credential every
// command that connects to the bus presents (docs/SECURITY.md). Both are
// deployment settings, so both are also BUB_TOKEN and BUB_TOKEN_FILE.
type credentialFlags struct {
	token     string
	tokenFile string
}

func (f *credentialFlags) addFlags(fs *flag.FlagSet) {
	// The default is never shown: a token set in the environment must
	// not appear in --help.
	fs.StringVar(&f.token, "token", "", "credential to present to the bus (prefer --token-file or BUB_TOKEN: a command line is visible to every user of the machine)")
	fs.StringVar(&f.tokenFile, "token-file", "", "file holding the credential, e.g. a mounted secret; surrounding white space is ignored")
	bindEnv(fs, "token")
	bindEnv(fs, "token-file")
}

// resolve returns the credential: --token, else the file's contents,
// else "" (an open bus needs none). Errors name the file, never its
// contents.
func (f *credentialFlags) resolve() (string, error) {
	if f.token != "" && f.tokenFile != "" {
		return "", fmt.Errorf("give --token or --token-file, not both")
	}
	if f.tokenFile == "" {
		return strings.TrimSpace(f.token), nil
	}
	data, err := os.ReadFile(f.tokenFile)
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	token := strings.TrimSpace(string(data))
	if token == "" {
		return "", fmt.Errorf("--token-file %s is empty", f.tokenFile)
	}
	return token, nil
}
