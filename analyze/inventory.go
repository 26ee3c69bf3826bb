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

// WriteInventoryText writes an inventory for people. Framebuffer and BAR1
// are listed as the separate views they are.
func WriteInventoryText(w io.Writer, inv store.Inventory) error {
	var b strings.Builder
	fmt.Fprintf(&b, "NVML %s: %s\n", inv.Library, inv.Init.Name)
	if inv.InitError != "" {
		fmt.Fprintf(&b, "  %s\n", inv.InitError)
	}
	if inv.Init.Code != 0 {
		_, err := io.WriteString(w, b.String())
		return err
	}
	fmt.Fprintf(&b, "driver %s, NVML %s, CUDA driver API %s\n", obsStr(inv.Driver), obsStr(inv.NVMLVersion), obsName(inv.CUDADriver, cudaVersion))
	if inv.IOMMU != nil {
		fmt.Fprintf(&b, "IOMMU active: %v (%s)\n", *inv.IOMMU, inv.IOMMUSource)
	}
	for _, g := range inv.GPUs {
		fmt.Fprintf(&b, "\nGPU %d  %s  %s  %s\n", g.Index, obsStr(g.Name), obsStr(g.UUID), obsStr(g.PCIBusID))
		fmt.Fprintf(&b, "  framebuffer total     %s\n", obsBytes(g.FBTotal))
		fmt.Fprintf(&b, "  framebuffer reserved  %s\n", obsBytes(g.FBReserved))
		fmt.Fprintf(&b, "  BAR1 aperture         %s  (maps device memory for the CPU and peers; not capacity)\n", obsBytes(g.BAR1Total))
		fmt.Fprintf(&b, "  MIG mode %s, persistence mode %s, compute mode %s\n",
			obsName(g.MIGMode, enabledName), obsName(g.Persistence, enabledName), obsName(g.ComputeMode, computeModeName))
		fmt.Fprintf(&b, "  PCIe gen %s x%s (max gen %s x%s)\n", obsStr(g.PCIeGen), obsStr(g.PCIeWidth), obsStr(g.PCIeMaxGen), obsStr(g.PCIeMaxWidth))
		if len(g.BARs) > 0 {
			var parts []string
			for _, bar := range g.BARs {
				parts = append(parts, fmt.Sprintf("BAR%d %s", bar.Index, report.HumanBytes(bar.Size)))
			}
			fmt.Fprintf(&b, "  PCI regions: %s (%s)\n", strings.Join(parts, ", "), g.BARsSource)
		} else if g.BARsSource != "" {
			fmt.Fprintf(&b, "  PCI regions: unknown (%s)\n", g.BARsSource)
		}
		for _, m := range g.MIG {
			fmt.Fprintf(&b, "  MIG %d  %s  framebuffer %s\n", m.Index, obsStr(m.UUID), obsBytes(m.FBTotal))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
