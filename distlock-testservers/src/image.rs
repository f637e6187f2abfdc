//! Which image a server runs: the pins in `images.txt`, and the choice between the
//! official image and the local one.

use testcontainers::bollard::Docker;

use crate::error::HarnessError;
use crate::Server;

const IMAGES: &str = include_str!("../images.txt");

/// The image pinned for `entry` in `images.txt`, as (name, tag).
pub(crate) fn pinned(entry: &str) -> Option<(&'static str, &'static str)> {
    IMAGES
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            Some((words.next()?, words.next()?))
        })
        .find(|(name, _)| *name == entry)
        .and_then(|(_, image)| image.rsplit_once(':'))
}

/// Which image a server runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageSource {
    /// The official image of the server's project.
    Official,
    /// The image built from Debian's packages by `scripts/build-images.sh`.
    Local,
}

async fn present(docker: &Docker, (name, tag): (&str, &str)) -> bool {
    docker.inspect_image(&format!("{name}:{tag}")).await.is_ok()
}

/// The image source that `DISTLOCK_IMAGES` asks for, resolved against the images
/// present on this machine.
pub async fn image_source(server: &dyn Server) -> Result<ImageSource, HarnessError> {
    if server.local_only() {
        return Ok(ImageSource::Local);
    }
    let choice = std::env::var("DISTLOCK_IMAGES").unwrap_or_else(|_| "auto".into());
    match choice.as_str() {
        "official" => Ok(ImageSource::Official),
        "local" => Ok(ImageSource::Local),
        "auto" | "" => {
            let docker = Docker::connect_with_local_defaults()
                .map_err(|e| HarnessError::Docker(Box::new(e)))?;
            let official =
                pinned(server.image_entry()).ok_or(HarnessError::NoPin(server.name()))?;
            let local = pinned("local").ok_or(HarnessError::NoPin("local"))?;
            if present(&docker, official).await {
                Ok(ImageSource::Official)
            } else if present(&docker, local).await {
                Ok(ImageSource::Local)
            } else {
                Ok(ImageSource::Official)
            }
        }
        other => Err(HarnessError::BadImageChoice(other.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_server_and_the_local_image_are_pinned() {
        for server in crate::ALL {
            let (_, tag) = pinned(server.name()).unwrap_or_else(|| panic!("{}", server.name()));
            assert_ne!(tag, "latest", "{} is not pinned", server.name());
        }
        assert!(pinned("local").is_some());
        // A server with no official image says so instead of naming one.
        assert_eq!(pinned("pgbouncer"), None);
        assert!(IMAGES
            .lines()
            .any(|l| l.split_whitespace().eq(["pgbouncer", "local"])));
        assert_eq!(pinned("nothing"), None);
    }
}
