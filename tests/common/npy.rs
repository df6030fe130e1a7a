//! Hand-made NPY and NPZ bytes, honest or lying, for tests of the external reader.

/// Raw NPY bytes: a version 1.0 header for `descr` and `shape` (which need not match
/// `data`), then `data`.
pub fn npy(descr: &str, shape: &[usize], data: &[u8]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let shape = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    let mut header = dict.into_bytes();
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(b' ');
    }
    header.push(b'\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend((header.len() as u16).to_le_bytes());
    out.extend(header);
    out.extend(data);
    out
}

/// An NPZ archive of `members` (array name, NPY bytes), deflated or stored.
pub fn npz(members: &[(&str, Vec<u8>)], deflate: bool) -> Vec<u8> {
    let named: Vec<(String, Vec<u8>)> = members
        .iter()
        .map(|(name, bytes)| (format!("{name}.npy"), bytes.clone()))
        .collect();
    zip_of(&named, deflate)
}

/// A zip archive of `members` (member name as written, bytes), deflated or stored: an
/// NPZ whose member names are not `<array>.npy`.
pub fn zip_of(members: &[(String, Vec<u8>)], deflate: bool) -> Vec<u8> {
    use std::io::Write;
    let mut z = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let method = if deflate {
        zip::CompressionMethod::Deflated
    } else {
        zip::CompressionMethod::Stored
    };
    let opts = zip::write::SimpleFileOptions::default().compression_method(method);
    for (name, bytes) in members {
        z.start_file(name.as_str(), opts).unwrap();
        z.write_all(bytes).unwrap();
    }
    z.finish().unwrap().into_inner()
}

/// Little-endian bytes of f64 values.
pub fn f64_bytes(v: &[f64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// The header member of an external NPZ: `{"format": "tokensel-external/2", "dtype":
/// "float64"}` as uint8.
pub fn external_header() -> Vec<u8> {
    let header = br#"{"format": "tokensel-external/2", "dtype": "float64"}"#;
    npy("|u1", &[header.len()], header)
}
