package analyze

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/retrivium/forensic/report"
	"github.com/retrivium/forensic/store"
)

// WriteInventoryJSON writes an inventory as JSON.
func WriteInventoryJSON(w io.Writer, inv store.Inventory) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(inv)
}

func obsStr[T any](o store.Obs[T]) string {
	if o.Value == nil {
		return "unknown (" + o.Status.Name + " from " + o.API + ")"
	}
	return fmt.Sprint(*o.Value)
}

func obsBytes(o store.Obs[uint64]) string {
	if o.Value == nil {
		return "unknown (" + o.Status.Name + " from " + o.API + ")"
	}
	return fmt.Sprintf("%s  [%s]", report.HumanBytes(*o.Value), o.API)
}

// obsName writes an NVML value that is a number standing for a name.
func obsName(o store.Obs[int], name func(int) string) string {
	if o.Value == nil {
		return obsStr(o)
	}
	return name(*o.Value)
}

// enabledName names nvmlEnableState_t (MIG and persistence modes).
func enabledName(v int) string {
	switch v {
	case 0:
		return "disabled"
	case 1:
		return "enabled"
	}
	return fmt.Sprintf("unknown value %d", v)
}

// computeModeName names nvmlComputeMode_t.
func computeModeName(v int) string {
	switch v {
	case 0:
		return "default"
	case 1:
		return "exclusive thread"
	case 2:
		return "prohibited"
	case 3:
		return "exclusive process"
	}
	return fmt.Sprintf("unknown value %d", v)
}

// cudaVersion writes cuDriverGetVersion's number (1000*major + 10*minor)
// as the version people know, with the number.
func cudaVersion(v int) string {
	if v <= 0 {
		return fmt.Sprint(v)
	}
	return fmt.Sprintf("%d.%d (%d)", v/1000, v%1000/10, v)
}

// inventoryWidth is the width the inventory's text fits in.
const inventoryWidth = 80

// WriteInventoryText writes an inventory for people, within 80 columns
// (a line longer than that is broken at spaces; a path is never cut).
// Framebuffer and BAR1 are listed as the separate views they are.
func WriteInventoryText(w io.Writer, inv store.Inventory) error {
	var b strings.Builder
	line := func(format string, a ...any) {
		for _, l := range report.Wrap(fmt.Sprintf(format, a...), inventoryWidth, "    ") {
			b.WriteString(l + "\n")
		}
	}
	line("NVML %s: %s", inv.Library, inv.Init.Name)
	if inv.InitError != "" {
		line("  %s", inv.InitError)
	}
	if inv.Init.Code != 0 {
		_, err := io.WriteString(w, b.String())
		return err
	}
	line("driver %s, NVML %s, CUDA driver API %s", obsStr(inv.Driver), obsStr(inv.NVMLVersion), obsName(inv.CUDADriver, cudaVersion))
	if inv.IOMMU != nil {
		line("IOMMU active: %v (%s)", *inv.IOMMU, inv.IOMMUSource)
	}
	for _, g := range inv.GPUs {
		b.WriteString("\n")
		gpuInventoryText(line, g)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// gpuInventoryText writes one GPU's part of the inventory, one fact a
// line, values aligned after their names.
func gpuInventoryText(line func(string, ...any), g store.GPUInventory) {
	line("GPU %d  %s", g.Index, obsStr(g.Name))
	line("  UUID                  %s", obsStr(g.UUID))
	line("  PCI bus id            %s", obsStr(g.PCIBusID))
	line("  framebuffer total     %s", obsBytes(g.FBTotal))
	line("  framebuffer reserved  %s", obsBytes(g.FBReserved))
	line("  BAR1 aperture         %s", obsBytes(g.BAR1Total))
	line("                        (maps device memory for the CPU and peers; not capacity)")
	line("  MIG mode %s, persistence mode %s, compute mode %s",
		obsName(g.MIGMode, enabledName), obsName(g.Persistence, enabledName), obsName(g.ComputeMode, computeModeName))
	line("  PCIe gen %s x%s (max gen %s x%s)", obsStr(g.PCIeGen), obsStr(g.PCIeWidth), obsStr(g.PCIeMaxGen), obsStr(g.PCIeMaxWidth))
	if len(g.BARs) > 0 {
		var parts []string
		for _, bar := range g.BARs {
			parts = append(parts, fmt.Sprintf("BAR%d %s", bar.Index, report.HumanBytes(bar.Size)))
		}
		line("  PCI regions: %s (%s)", strings.Join(parts, ", "), g.BARsSource)
	} else if g.BARsSource != "" {
		line("  PCI regions: unknown (%s)", g.BARsSource)
	}
	for _, m := range g.MIG {
		line("  MIG %-2d                %s", m.Index, obsStr(m.UUID))
		line("    framebuffer         %s", obsBytes(m.FBTotal))
	}
}
