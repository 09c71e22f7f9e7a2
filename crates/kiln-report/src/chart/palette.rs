//! The charts' colours: one fill per kind of bar, one palette for charts with several series.

use plotters::prelude::RGBColor;

/// Fill of the epoch-time bars (tests count bars by it).
pub const TIME_COLOR: RGBColor = RGBColor(0x2b, 0x6c, 0xb0);
/// Fill of the speed-up bars.
pub const SPEEDUP_COLOR: RGBColor = RGBColor(0xd9, 0x6c, 0x1e);

/// Colour of the out-of-memory crosses.
pub const OOM_COLOR: RGBColor = RGBColor(0xc0, 0x1c, 0x28);

/// Fill of the time-to-accuracy bars.
pub const TARGET_COLOR: RGBColor = RGBColor(0x3a, 0x8a, 0x4a);

/// One palette for every chart with several series: accuracy curves (one per row, cycled) and
/// the explain chart's stacked segments (heaviest row first).
pub const PALETTE: [RGBColor; 9] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];
pub const OTHER_COLOR: RGBColor = RGBColor(170, 170, 170);
