package gateway

import "reflect"

// ReloadFile re-reads the config file the server runs from and applies it
// (Reload), then logs the new config's warnings at warn. An invalid file
// leaves the running config serving; the error carries FILE:LINE. With built-in defaults there is nothing to re-read.
func (s *Server) ReloadFile() error {
	path := s.cfg.Load().Path()
	if path == "" {
		return nil
	}
	next, err := LoadConfig(path)
	if err != nil {
		return err
	}
	if err := s.Reload(next); err != nil {
		return err
	}
	// What -check prints as warnings, logged as a start logs them
	// (cmd/rotor): a reload can bring one in.
	for _, w := range next.Warnings() {
		s.log.Warn().Str("config", path).Msg(w)
	}
	return nil
}

// healthChanged reports whether next gives the health tracker another
// configuration than prev (trackerConfig): only then does Reload apply it.
func healthChanged(prev, next *Config) bool {
	a, b := trackerConfig(prev), trackerConfig(next)
	// A probe.ca_file is read again at each reload (its contents may have
	// changed under the same name); the pools read are not comparable.
	a.Probe.TLS, b.Probe.TLS = nil, nil
	return !reflect.DeepEqual(a, b) || next.Probe.CAFile != ""
}
