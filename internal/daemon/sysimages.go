package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// DefaultSystemImages is the directory of system image archives kilnd
// seeds when Config.SystemImages is empty, beside its executable: make
// system-images writes bin/images beside bin/kilnd.
const DefaultSystemImages = "images"

// seedSystemImages puts every archive (*.tar) of the system images
// directory into the registry's kiln.system namespace (registry.Seed), and
// every chart archive (*.tgz) into kiln.system/charts (registry.SeedChart),
// logging one line per name of each image: seeded, or already there. The default
// directory may be missing (nothing is seeded; said at info); one named by
// --system-images must exist. An archive that cannot be seeded stops the
// start: clusters would miss the image later, with less to go on.
func (d *Daemon) seedSystemImages(ctx context.Context) error {
	dir, named := d.cfg.SystemImages, d.cfg.SystemImages != ""
	if !named {
		dir = besideExecutable(DefaultSystemImages)
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) && !named {
		d.log.Info("no system images to seed: their directory does not exist (make system-images builds them; --system-images names another)", "dir", dir)
		return nil
	} else if err != nil {
		return flagError("--system-images", d.cfg.SystemImages, "--system-images: %w", err)
	}
	seeded := 0
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".tgz") && !strings.HasPrefix(e.Name(), ".") {
			if err := d.seedChart(ctx, filepath.Join(dir, e.Name())); err != nil {
				return err
			}
			seeded++
			continue
		}
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".tar") || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		all, err := d.registry.Seed(ctx, path)
		if err != nil {
			return fmt.Errorf("seed the system image %s: %w", path, err)
		}
		for _, s := range all {
			result := "seeded"
			if !s.Pushed {
				result = "already there"
			}
			d.log.Info("system image "+result, "image", s.Ref, "stored", s.Repository+":"+s.Tag, "digest", s.Digest, "file", path)
		}
		seeded++
	}
	if seeded == 0 {
		d.log.Info("no system images to seed: their directory holds no archive (*.tar)", "dir", dir)
	}
	return nil
}

// seedChart puts a chart archive Kiln ships (*.tgz of the system images
// directory: the local-path and metrics-server packs' charts) into the
// registry's kiln.system/charts.
func (d *Daemon) seedChart(ctx context.Context, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("seed the chart %s: %w", path, err)
	}
	s, err := d.registry.SeedChart(ctx, data)
	if err != nil {
		return fmt.Errorf("seed the chart %s: %w", path, err)
	}
	result := "seeded"
	if !s.Pushed {
		result = "already there"
	}
	d.log.Info("chart "+result, "chart", s.Ref, "stored", s.Repository+":"+s.Tag, "digest", s.Digest, "file", path)
	return nil
}
